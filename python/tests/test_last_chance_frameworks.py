"""The last-chance save with a real torch.OutOfMemoryError raised inside a training step, on the CPU.

For Lightning (``WatchdogCallback.on_exception``), Transformers and Keras (torch backend)
(their ``last_chance`` context managers) and a plain loop (``training_watchdog.last_chance``):
``frameworks/oom_X.py oom DIR`` raises the error at a known step; the test checks that the
error ended the script as itself, that the checkpoint exists and is complete, that the ack
says ``cause``, ``path`` and ``step``, and that ``oom_X.py resume DIR`` (the framework's own
resume call) starts where the framework resumes with the weights of the failure: Lightning
and Transformers at the step taken, Keras at the start of the interrupted epoch.

Two ranks: Lightning DDP and the Trainer under ``torchrun --nproc_per_node 2`` (gloo), only
rank 1 fails: rank 1 saves alone, no process hangs (bounded by a timeout), and the
checkpoint resumes in one process; with a ZeroRedundancyOptimizer (a sharded state) the
save is refused, saying why, and nothing hangs either. One case runs under the real watchdog
(``watchdog run``, $WATCHDOG_BIN) with a request pending: the ack answers it, and the
watchdog reads it at the request file it gave the run.

Frameworks from scripts/frameworks-requirements.txt; missing: fail under CI, skip otherwise.
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
sys.path.insert(0, HERE)
import need  # noqa: E402
from test_frameworks import RUN_TIMEOUT, child_env, read_events  # noqa: E402

FAIL_AT = 6  # frameworks/oom_common.py
OOM_TYPE = "torch.OutOfMemoryError"


def load(path):
    with open(path) as f:
        return json.load(f)


class LastChance(unittest.TestCase):
    def run_script(self, d, script, mode, env=None, command=None):
        cmd = (command or []) + [sys.executable, os.path.join(SCRIPTS, script), mode, d]
        return subprocess.run(cmd, cwd=d, env=env or child_env(), capture_output=True, text=True,
                              timeout=RUN_TIMEOUT)

    def oom(self, d, script, env=None, command=None, seq=0):
        """Run SCRIPT in oom mode; check the error ended it as itself and the ack (answering
        request SEQ, 0: none); returns (failed, ack)."""
        if env is None:
            env = dict(child_env(), WATCHDOG_REQUEST_FILE=os.path.join(d, "request.json"))
        run = self.run_script(d, script, "oom", env, command)
        self.assertEqual(run.returncode, 1, "the OOM should end the script\n" + run.stderr[-4000:])
        self.assertIn(OOM_TYPE + ": ", run.stderr, "the traceback should end with the OOM")
        self.assertEqual(load(os.path.join(d, "raised-0.json"))["type"], OOM_TYPE)
        failed = load(os.path.join(d, "failed.json"))
        ack = load(os.path.join(d, "request.json.ack"))
        self.assertEqual(ack["seq"], seq, ack)
        self.assertEqual(ack["cause"], "cuda_oom", ack)
        self.assertEqual(ack["step"], failed["step"], ack)
        self.assertTrue(os.path.isabs(ack["path"]) and os.path.exists(ack["path"]), ack)
        self.assertIn("last-chance save", run.stderr)
        return failed, ack

    def resume(self, d, script, step):
        """Resume with the framework's call; check it starts at STEP with the weights of the failure."""
        run = self.run_script(d, script, "resume")
        self.assertEqual(run.returncode, 0, run.stderr[-4000:])
        resumed, failed = load(os.path.join(d, "resumed.json")), load(os.path.join(d, "failed.json"))
        self.assertEqual(resumed["step"], step, "did not resume where the framework resumes")
        self.assertEqual(resumed["digest"], failed["digest"], "the resumed weights are not those of the failure")

    def test_lightning_on_exception_saves_a_checkpoint_fit_resumes_at_the_step(self):
        need.require_modules("torch", "lightning")
        import torch

        with tempfile.TemporaryDirectory(prefix="tw-oom-") as d:
            failed, ack = self.oom(d, "oom_lightning.py")
            self.assertEqual(failed["step"], FAIL_AT)
            self.assertEqual(os.path.basename(ack["path"]), "watchdog-step=%d.ckpt" % FAIL_AT)
            ckpt = torch.load(ack["path"], weights_only=False)
            self.assertEqual(ckpt["global_step"], FAIL_AT)
            for key in ("state_dict", "optimizer_states", "loops", "callbacks"):
                self.assertIn(key, ckpt)
            self.resume(d, "oom_lightning.py", FAIL_AT)

    def test_transformers_last_chance_saves_a_checkpoint_train_resumes_at_the_step(self):
        need.require_modules("torch", "transformers", "accelerate")
        with tempfile.TemporaryDirectory(prefix="tw-oom-") as d:
            failed, ack = self.oom(d, "oom_transformers.py")
            self.assertEqual(ack["path"], os.path.join(d, "out", "checkpoint-%d" % FAIL_AT))
            for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"):
                self.assertTrue(os.path.exists(os.path.join(ack["path"], name)), name)
            self.assertEqual(load(os.path.join(ack["path"], "trainer_state.json"))["global_step"], FAIL_AT)
            self.resume(d, "oom_transformers.py", FAIL_AT)

    def test_keras_last_chance_saves_through_backup_and_restore_fit_resumes_the_epoch(self):
        need.require_modules("torch", "keras")
        with tempfile.TemporaryDirectory(prefix="tw-oom-") as d:
            failed, ack = self.oom(d, "oom_keras.py")
            self.assertEqual(ack["path"], os.path.join(d, "backup"))
            self.assertEqual(ack["step"], 2 * 8 + 3, "the optimizer's iterations: 2 epochs of 8 batches and 3")
            self.assertTrue(os.path.exists(os.path.join(d, "backup", "latest.weights.h5")))
            self.assertEqual(load(os.path.join(d, "backup", "training_metadata.json"))["epoch"], 2)
            # BackupAndRestore saved at the end of epoch 1 too: the weights of the failure, three
            # batches into epoch 2, are there only if the last-chance save wrote them.
            self.resume(d, "oom_keras.py", 2)

    def test_plain_loop_last_chance_calls_save_with_the_step_and_resumes(self):
        need.require_modules("torch")
        with tempfile.TemporaryDirectory(prefix="tw-oom-") as d:
            failed, ack = self.oom(d, "oom_plain.py")
            self.assertEqual(ack["path"], os.path.join(d, "ckpt-%d.pt" % FAIL_AT))
            self.resume(d, "oom_plain.py", FAIL_AT)

    def test_under_the_watchdog_the_ack_is_read_at_the_request_file_it_gave(self):
        need.require_modules("torch")
        binary = need.watchdog_bin()
        with tempfile.TemporaryDirectory(prefix="tw-oom-") as d:
            events = os.path.join(d, "events.jsonl")
            # A runtime limit inside the lead: the watchdog asks at once, and the failing step
            # waits for that request (OOM_WAIT_REQUEST), which the last-chance save answers.
            command = [binary, "--gpu", "off", "--max-runtime", "10m", "--lead", "20m", "--events", events,
                       "--request-file", os.path.join(d, "request.json"), "run", "--"]
            self.oom(d, "oom_plain.py", dict(child_env(), OOM_WAIT_REQUEST="1"), command, seq=1)
            kinds = [e["event"] for e in read_events(events)]
            self.assertEqual(kinds.count("alert"), 1, kinds)
            self.assertEqual(kinds.count("ack"), 1, "the watchdog did not read the ack: %s" % kinds)
            exits = [e for e in read_events(events) if e["event"] == "exit"]
            self.assertEqual([e.get("code") for e in exits], [1], exits)


class LastChanceOnTwoRanks(unittest.TestCase):
    def run_ranks(self, d, script, mode):
        """torchrun SCRIPT MODE on two gloo ranks, rank 1 failing; checks that every process
        ended (none hung) with an error and that rank 1 raised the OOM; returns the output."""
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
               os.path.join(SCRIPTS, script), mode, d]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=d, env=child_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            self.fail("a rank hung after rank 1's CUDA OOM\n" + out[-4000:])
        self.assertNotEqual(proc.returncode, 0, out[-4000:])
        self.assertEqual(load(os.path.join(d, "raised-1.json"))["type"], OOM_TYPE)
        self.assertFalse(os.path.exists(os.path.join(d, "request-rank0.json.ack")), "rank 0 did not fail")
        sys.stderr.write("  %s %s: all ranks ended in %.1f s\n" % (script, mode, time.monotonic() - t0))
        return out

    def two_ranks(self, script, checkpoint):
        """Rank 1 of two fails: it saves alone, and one process resumes from that checkpoint."""
        with tempfile.TemporaryDirectory(prefix="tw-oom-ranks-") as d:
            self.run_ranks(d, script, "ranks")
            ack = load(os.path.join(d, "request-rank1.json.ack"))
            self.assertEqual((ack["seq"], ack["cause"], ack["step"]), (0, "cuda_oom", FAIL_AT), ack)
            self.assertEqual(ack["path"], os.path.join(d, checkpoint))
            self.assertTrue(os.path.exists(ack["path"]), ack)
            # Complete: one process resumes from it at the step, with rank 1's weights.
            LastChance.resume(self, d, script, FAIL_AT)

    def test_lightning_a_sharded_optimizer_is_refused_clearly_and_nothing_hangs(self):
        need.require_modules("torch", "lightning")
        with tempfile.TemporaryDirectory(prefix="tw-oom-ranks-") as d:
            out = self.run_ranks(d, "oom_lightning.py", "zero")
            self.assertIn("ZeroRedundancyOptimizer shards the training state across the 2 ranks", out)
            self.assertFalse(os.path.exists(os.path.join(d, "request-rank1.json.ack")), "nothing was saved")
            self.assertFalse(os.path.exists(os.path.join(d, "checkpoints")), os.listdir(d))

    # LastChance.resume and run_script, shared without running LastChance's tests twice.
    run_script = LastChance.run_script

    def test_lightning_ddp_the_failing_rank_saves_alone_and_nothing_hangs(self):
        need.require_modules("torch", "lightning")
        self.two_ranks("oom_lightning.py", os.path.join("checkpoints", "watchdog-step=%d.ckpt" % FAIL_AT))

    def test_transformers_ddp_the_failing_rank_saves_alone_and_nothing_hangs(self):
        need.require_modules("torch", "transformers", "accelerate")
        self.two_ranks("oom_transformers.py", os.path.join("out", "checkpoint-%d" % FAIL_AT))


    def test_transformers_a_sharded_state_is_refused_before_anything_is_written(self):
        need.require_modules("torch", "transformers", "accelerate")
        import torch
        from transformers import Trainer, TrainingArguments

        import training_watchdog.transformers as twt

        with tempfile.TemporaryDirectory(prefix="tw-oom-") as d:
            args = TrainingArguments(output_dir=os.path.join(d, "out"), use_cpu=True, report_to=[])
            trainer = Trainer(model=torch.nn.Linear(2, 1), args=args)
            path = os.path.join(d, "out", "checkpoint-0")
            for flag in ("is_fsdp_enabled", "is_deepspeed_enabled"):
                setattr(trainer, flag, True)  # what the Trainer sets from its accelerator's plugins
                with self.assertRaisesRegex(RuntimeError, "shards the training state"):
                    twt._save_replicated(trainer, path)
                setattr(trainer, flag, False)
            self.assertFalse(os.path.exists(path))

if __name__ == "__main__":
    unittest.main()
