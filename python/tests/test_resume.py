"""Which checkpoint a run resumes from (training_watchdog.resume and the framework helpers).

Real files: a checkpoint the run died writing sits next to a complete one, and the helpers
must pick the complete one. Lightning's are written by ``torch.save`` (what
``trainer.save_checkpoint`` writes) and cut short; Transformers' are ``checkpoint-N``
directories as ``Trainer._save_checkpoint`` leaves them, with and without the
``trainer_state.json`` it writes last. The framework tests fail under CI and skip
elsewhere when torch, lightning or transformers is missing (need.py).
"""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import need  # noqa: E402
from training_watchdog import record, resume  # noqa: E402

ENV = ("WATCHDOG_RESUME_FROM", "WATCHDOG_RESTART", "WATCHDOG_LAST_VERDICT", "WATCHDOG_CHECKPOINT_RECORD",
       "WATCHDOG_RUN_KEY", "SLURM_JOB_ID")


class Env(unittest.TestCase):
    """Each test starts without the restart and record variables and gets them back afterwards;
    the checkpoint record is ``self.record`` (none until a test writes it)."""

    def setUp(self):
        saved = {k: os.environ.pop(k, None) for k in ENV}

        def restore():
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v

        self.addCleanup(restore)
        self.dir = tempfile.mkdtemp(prefix="tw-resume-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.record = os.path.join(tempfile.mkdtemp(prefix="tw-resume-record-"), ".watchdog-checkpoints.json")
        self.addCleanup(shutil.rmtree, os.path.dirname(self.record), True)
        os.environ["WATCHDOG_CHECKPOINT_RECORD"] = self.record
        self.recorded = []

    def ack(self, key, path, step, verdict=None):
        """Records ``path`` for run key ``key`` as ``watchdog run`` does after an acknowledgment."""
        size, mtime_ns = record.measure(path)
        self.recorded.append({"key": key, "path": os.path.relpath(path, os.path.dirname(self.record)),
                              "step": step, "size": size, "mtime_ns": mtime_ns, "time_unix": 1718000000.0,
                              "attempt": 1, "verdict": verdict})
        with open(self.record, "w") as f:
            json.dump({"version": 1, "entries": self.recorded}, f)

    def said(self, fn, *args):
        """(fn's answer, what it wrote on stderr)."""
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            answer = fn(*args)
        return answer, err.getvalue()


def cut(src, dst, size):
    """``dst``: the first ``size`` bytes of ``src``, as a save killed mid-write leaves it."""
    with open(src, "rb") as f:
        data = f.read(size)
    with open(dst, "wb") as f:
        f.write(data)


class WholeTorchZip(Env):
    def test_a_zip_cut_anywhere_is_not_whole(self):
        path = os.path.join(self.dir, "a.ckpt")
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", b"\x80\x04N." * 100)
            z.writestr("archive/data/0", os.urandom(5000))
        self.assertTrue(resume.whole_torch_zip(path))
        size = os.path.getsize(path)
        short = os.path.join(self.dir, "short.ckpt")
        for n in list(range(0, size, 97)) + [size - 1]:
            cut(path, short, n)
            self.assertFalse(resume.whole_torch_zip(short), "cut at %d of %d bytes" % (n, size))

    def test_a_zip_without_a_pickle_or_a_directory_is_not_a_torch_file(self):
        path = os.path.join(self.dir, "other.zip")
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("readme.txt", "not a checkpoint")
        self.assertFalse(resume.whole_torch_zip(path))
        self.assertFalse(resume.whole_torch_zip(self.dir))
        self.assertFalse(resume.whole_torch_zip(os.path.join(self.dir, "missing.ckpt")))


class LightningLatestCheckpoint(Env):
    def setUp(self):
        super().setUp()
        need.require_modules("torch", "lightning")
        import torch

        from training_watchdog.lightning import latest_checkpoint

        self.latest = latest_checkpoint
        self.torch = torch

    def save(self, name, step):
        """A checkpoint as trainer.save_checkpoint writes it (torch.save of a dict), in self.dir."""
        path = os.path.join(self.dir, name)
        self.torch.save({"global_step": step, "state_dict": {"w": self.torch.randn(64, 64)}}, path)
        return path

    def test_a_checkpoint_the_run_died_writing_is_never_chosen(self):
        complete = self.save("watchdog-step=10.ckpt", 10)
        whole = self.save("tmp.ckpt", 20)
        size = os.path.getsize(whole)
        half = os.path.join(self.dir, "watchdog-step=20.ckpt")
        for n in (0, 1, size // 2, size - 1):
            cut(whole, half, n)
            path, err = self.said(self.latest, self.dir)
            self.assertEqual(path, complete, "cut at %d of %d bytes" % (n, size))
            self.assertIn("resuming at step 10 from %s" % complete, err)
            self.assertIn("skipped, incomplete: watchdog-step=20.ckpt", err)
            self.assertEqual(len(err.splitlines()), 1, err)

    def test_the_highest_step_among_ours_and_model_checkpoints(self):
        self.save("watchdog-step=30.ckpt", 30)
        newest = self.save("epoch=1-step=45.ckpt", 45)
        self.save("epoch=0-step=7.ckpt", 7)
        self.save("last.ckpt", 50)  # no step in its name: not a candidate
        self.assertEqual(self.said(self.latest, self.dir)[0], newest)

    def test_watchdog_resume_from_wins_when_complete_and_in_the_directory(self):
        acked = self.save("watchdog-step=12.ckpt", 12)
        self.save("epoch=0-step=40.ckpt", 40)
        os.environ.update(WATCHDOG_RESUME_FROM=acked, WATCHDOG_RESTART="1", WATCHDOG_LAST_VERDICT="oom_kill")
        path, err = self.said(self.latest, self.dir)
        self.assertEqual(path, acked)
        self.assertIn("resuming at step 12 from %s, the last checkpoint the watchdog saw acknowledged" % acked, err)
        self.assertIn("(restart 1 after oom_kill)", err)

    def test_a_step_not_in_the_name_is_read_from_the_checkpoint(self):
        acked = self.save("mine.ckpt", 33)
        os.environ["WATCHDOG_RESUME_FROM"] = acked
        path, err = self.said(self.latest, self.dir)
        self.assertEqual(path, acked)
        self.assertIn("resuming at step 33 from", err)

    def test_watchdog_resume_from_gone_cut_or_elsewhere_falls_back_to_the_directory(self):
        complete = self.save("watchdog-step=5.ckpt", 5)
        gone = os.path.join(self.dir, "watchdog-step=9.ckpt")
        os.environ["WATCHDOG_RESUME_FROM"] = gone
        path, err = self.said(self.latest, self.dir)
        self.assertEqual(path, complete)
        self.assertIn("WATCHDOG_RESUME_FROM=%s no longer exists" % gone, err)

        whole = self.save("whole.ckpt", 9)
        cut(whole, gone, os.path.getsize(whole) // 3)
        os.remove(whole)
        path, err = self.said(self.latest, self.dir)
        self.assertEqual(path, complete)
        self.assertIn("is not a complete Lightning .ckpt", err)

        other = tempfile.mkdtemp(prefix="tw-resume-other-")
        self.addCleanup(shutil.rmtree, other, True)
        elsewhere = os.path.join(other, "watchdog-step=99.ckpt")
        self.torch.save({"global_step": 99}, elsewhere)
        os.environ["WATCHDOG_RESUME_FROM"] = elsewhere
        path, err = self.said(self.latest, self.dir)
        self.assertEqual(path, complete)
        self.assertIn("is not in %s" % self.dir, err)

    def test_two_jobs_in_one_directory_never_resume_from_each_others(self):
        # pytorch-lightning #12369: two requeued jobs in one directory loaded each other's checkpoints
        first = self.save("watchdog-step=10.ckpt", 10)
        self.ack("slurm-100", first, 10)
        second = self.save("watchdog-step=20.ckpt", 20)
        self.ack("slurm-200", second, 20, verdict="runtime_limit")
        os.environ["SLURM_JOB_ID"] = "100"
        path, err = self.said(self.latest, self.dir)
        self.assertEqual(path, first)
        self.assertIn("resuming at step 10 from %s, the newest complete checkpoint of run key slurm-100" % first, err)
        os.environ["SLURM_JOB_ID"] = "200"
        self.assertEqual(self.said(self.latest, self.dir)[0], second)
        # job 100's own was rewritten since (another save in progress): the directory is
        # asked, and job 200's checkpoint is never the answer
        os.environ["SLURM_JOB_ID"] = "100"
        cut(second, first, os.path.getsize(second) // 2)
        path, err = self.said(self.latest, self.dir)
        self.assertIsNone(path)
        self.assertIn("watchdog-step=20.ckpt (slurm-200)", err)
        self.assertIn("a fresh start", err)
        self.assertEqual(len(err.splitlines()), 1, err)

    def test_a_recorded_checkpoint_that_changed_is_not_offered(self):
        older = self.save("mine-a.ckpt", 4)
        self.ack("default", older, 4)
        newer = self.save("mine-b.ckpt", 8)
        self.ack("default", newer, 8)
        self.save("epoch=0-step=2.ckpt", 2)
        self.torch.save({"global_step": 9, "state_dict": {}}, newer)  # saved again over it
        path, err = self.said(self.latest, self.dir)
        self.assertEqual(path, older)
        self.assertIn("resuming at step 4 from %s" % older, err)

    def test_nothing_complete_is_a_fresh_start(self):
        path, err = self.said(self.latest, os.path.join(self.dir, "never-made"))
        self.assertIsNone(path)
        self.assertIn("a fresh start", err)
        with open(os.path.join(self.dir, "watchdog-step=3.ckpt"), "wb") as f:
            f.write(b"PK\x03\x04 half a header")
        path, err = self.said(self.latest, self.dir)
        self.assertIsNone(path)
        self.assertIn("no complete Lightning .ckpt in %s (incomplete: watchdog-step=3.ckpt): a fresh start" % self.dir, err)


class PlantedFiles(Env):
    """What the resume helpers read of a checkpoint, planted as a FIFO, a device or too big:
    refused at once, said once (issue 29). In a subprocess with a timeout: a blocked open
    would hang the test run."""

    def in_subprocess(self, code):
        code = "import sys; sys.path.insert(0, %r)\nfrom training_watchdog import resume\n%s" % (
            os.path.join(HERE, ".."), code)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout.strip(), done.stderr

    def test_a_fifo_is_neither_json_nor_a_whole_zip_and_never_waited_on(self):
        fifo = os.path.join(self.dir, "watchdog-step=5.ckpt")
        os.mkfifo(fifo)
        out, err = self.in_subprocess("print(resume.read_json(%r, 1024), resume.whole_torch_zip(%r))" % (fifo, fifo))
        self.assertEqual(out, "None False")
        self.assertEqual(err.count("not reading %s: not a regular file" % fifo), 1, err)

    def test_a_device_and_an_oversize_file_are_refused(self):
        big = os.path.join(self.dir, "state.json")
        with open(big, "w") as f:
            json.dump({"global_step": 1, "pad": "x" * 2048}, f)
        out, err = self.in_subprocess("print(resume.read_json(%r, 1024), resume.whole_torch_zip('/dev/zero'))" % big)
        self.assertEqual(out, "None False")
        self.assertIn("more than the 1024 read", err)
        self.assertIn("not reading /dev/zero: not a regular file", err)

    def test_a_zip_whose_directory_claims_more_than_the_cap_is_not_read(self):
        path = os.path.join(self.dir, "big.ckpt")
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", b"x")
        self.assertTrue(resume.whole_torch_zip(path))
        saved = resume.MAX_ZIP_DIRECTORY_BYTES
        resume.MAX_ZIP_DIRECTORY_BYTES = 10
        self.addCleanup(setattr, resume, "MAX_ZIP_DIRECTORY_BYTES", saved)
        answer, err = self.said(resume.whole_torch_zip, path)
        self.assertFalse(answer)
        self.assertIn("its zip directory is more than the 10 bytes read", err)


class TransformersResumeCheckpoint(Env):
    def setUp(self):
        super().setUp()
        need.require_modules("torch", "transformers")
        from training_watchdog.transformers import resume_checkpoint

        self.resume = resume_checkpoint

    def checkpoint(self, step, state="whole"):
        """``checkpoint-STEP`` as Trainer._save_checkpoint leaves it: the model, the optimizer,
        the RNG state, then trainer_state.json; ``state`` "none" stops before it, "cut"
        during it."""
        path = os.path.join(self.dir, "checkpoint-%d" % step)
        os.makedirs(path)
        for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
            with open(os.path.join(path, name), "wb") as f:
                f.write(os.urandom(256))
        text = json.dumps({"global_step": step, "epoch": 0.5, "log_history": [], "max_steps": 100},
                          indent=2, sort_keys=True) + "\n"
        if state == "cut":
            text = text[: len(text) // 2]
        if state != "none":
            with open(os.path.join(path, "trainer_state.json"), "w") as f:
                f.write(text)
        return path

    def test_a_checkpoint_the_run_died_writing_is_never_chosen(self):
        complete = self.checkpoint(40)
        self.checkpoint(60, "none")
        self.checkpoint(80, "cut")
        path, err = self.said(self.resume, self.dir)
        self.assertEqual(path, complete)
        self.assertIn("resuming at step 40 from %s" % complete, err)
        self.assertIn("skipped, incomplete: checkpoint-80, checkpoint-60", err)

    def test_the_highest_step_by_number_not_by_name(self):
        self.checkpoint(9)
        newest = self.checkpoint(10)
        os.makedirs(os.path.join(self.dir, "checkpoint-11-tmp"))
        self.assertEqual(self.said(self.resume, self.dir)[0], newest)

    def test_watchdog_resume_from_wins_and_falls_back_when_incomplete(self):
        acked = self.checkpoint(20)
        self.checkpoint(30)
        os.environ.update(WATCHDOG_RESUME_FROM=acked, WATCHDOG_RESTART="2", WATCHDOG_LAST_VERDICT="gpu_oom")
        path, err = self.said(self.resume, self.dir)
        self.assertEqual(path, acked)
        os.environ["WATCHDOG_RESUME_FROM"] = acked + "/"
        self.assertEqual(self.said(self.resume, self.dir + "/")[0], acked + "/")
        os.environ["WATCHDOG_RESUME_FROM"] = acked
        self.assertIn("resuming at step 20 from %s, the last checkpoint the watchdog saw acknowledged "
                      "(restart 2 after gpu_oom)" % acked, err)
        os.remove(os.path.join(acked, "trainer_state.json"))
        path, err = self.said(self.resume, self.dir)
        self.assertEqual(path, os.path.join(self.dir, "checkpoint-30"))
        self.assertIn("is not a complete Trainer checkpoint", err)

    def test_a_real_trainer_dying_before_its_trainer_state_leaves_a_checkpoint_that_is_passed_over(self):
        import torch
        from transformers import Trainer, TrainingArguments

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(4, 1)

            def forward(self, x, labels=None):
                return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

        class Data(torch.utils.data.Dataset):
            def __len__(self):
                return 32

            def __getitem__(self, i):
                return {"x": torch.full((4,), float(i)), "labels": torch.tensor([float(i)])}

        class DiesInItsSecondSave(Trainer):
            """Stops where a kill would: after the model, optimizer and scheduler, before the RNG
            state and trainer_state.json."""

            def _save_rng_state(self, output_dir):
                if self.state.global_step == 8:
                    raise KeyboardInterrupt("killed in the middle of the save")
                return super()._save_rng_state(output_dir)

        out = os.path.join(self.dir, "out")
        args = TrainingArguments(output_dir=out, max_steps=8, save_strategy="steps", save_steps=4,
                                 per_device_train_batch_size=4, report_to=[], use_cpu=True,
                                 logging_strategy="no", disable_tqdm=True)
        with self.assertRaises(KeyboardInterrupt):
            DiesInItsSecondSave(model=Model(), args=args, train_dataset=Data()).train()
        whole, cut_short = os.path.join(out, "checkpoint-4"), os.path.join(out, "checkpoint-8")
        self.assertIn("optimizer.pt", os.listdir(cut_short))
        self.assertNotIn("trainer_state.json", os.listdir(cut_short))
        # trainer_state.json is what the Trainer writes last
        mtimes = {n: os.stat(os.path.join(whole, n)).st_mtime_ns for n in os.listdir(whole)}
        self.assertEqual(max(mtimes.values()), mtimes["trainer_state.json"], mtimes)
        path, err = self.said(self.resume, out)
        self.assertEqual(path, whole)
        self.assertIn("resuming at step 4 from %s" % whole, err)
        self.assertIn("skipped, incomplete: checkpoint-8", err)

    def test_the_record_names_this_jobs_checkpoint_and_the_fallback_skips_the_other_jobs(self):
        mine = self.checkpoint(40)
        self.ack("slurm-7", mine, 40, verdict="runtime_limit")
        theirs = self.checkpoint(60)
        self.ack("slurm-8", theirs, 60)
        self.checkpoint(50)  # recorded by no one
        os.environ.update(SLURM_JOB_ID="7", WATCHDOG_RESTART="1", WATCHDOG_LAST_VERDICT="runtime_limit")
        path, err = self.said(self.resume, self.dir)
        self.assertEqual(path, mine)
        self.assertIn("run key slurm-7", err)
        with open(os.path.join(mine, "optimizer.pt"), "ab") as f:  # changed inside since
            f.write(b"x")
        path, err = self.said(self.resume, self.dir)
        self.assertEqual(path, os.path.join(self.dir, "checkpoint-50"))
        self.assertIn("checkpoint-60 (slurm-8)", err)

    def test_no_output_dir_is_a_fresh_start(self):
        path, err = self.said(self.resume, os.path.join(self.dir, "out"))
        self.assertIsNone(path)
        self.assertIn("a fresh start", err)

    def resume_in_a_subprocess(self, named):
        """``resume_checkpoint(self.dir)`` in a fresh interpreter with WATCHDOG_RESUME_FROM=named,
        within 120 s (importing transformers takes seconds; the FIFO blocked it for good)."""
        code = ("import sys; sys.path.insert(0, %r)\n"
                "from training_watchdog.transformers import resume_checkpoint\n"
                "print(resume_checkpoint(%r))\n" % (os.path.join(HERE, ".."), self.dir))
        env = dict(os.environ, WATCHDOG_RESUME_FROM=named)
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout.strip(), done.stderr

    def test_a_trainer_state_that_is_a_fifo_is_passed_over_at_once(self):
        # issue 29: WATCHDOG_RESUME_FROM=out/checkpoint-5 with a FIFO for its trainer_state.json
        # blocked resume_checkpoint for over 150 s before training started.
        complete = self.checkpoint(4)
        planted = self.checkpoint(5, "none")
        os.mkfifo(os.path.join(planted, "trainer_state.json"))
        path, err = self.resume_in_a_subprocess(planted)
        self.assertEqual(path, complete)
        self.assertIn("not reading %s: not a regular file" % os.path.join(planted, "trainer_state.json"), err)
        self.assertIn("WATCHDOG_RESUME_FROM=%s is not a complete" % planted, err)

    def test_a_trainer_state_over_the_cap_is_passed_over(self):
        from training_watchdog import transformers as tw_transformers

        complete = self.checkpoint(4)
        planted = self.checkpoint(5, "none")
        state = os.path.join(planted, "trainer_state.json")
        with open(state, "w") as f:  # whole JSON with a global_step: only its size is wrong
            f.write('{"global_step": 5, "log_history": [], "pad": "')
            f.write("x" * tw_transformers.MAX_STATE_BYTES)
            f.write('"}')
        path, err = self.resume_in_a_subprocess(planted)
        self.assertEqual(path, complete)
        self.assertIn("not reading %s: %d bytes, more than the %d read"
                      % (state, os.path.getsize(state), tw_transformers.MAX_STATE_BYTES), err)

    def test_a_trainer_state_behind_a_link_is_not_followed(self):
        complete = self.checkpoint(4)
        planted = self.checkpoint(5, "none")
        os.symlink(os.path.join(complete, "trainer_state.json"), os.path.join(planted, "trainer_state.json"))
        path, err = self.said(self.resume, self.dir)
        self.assertEqual(path, complete)
        self.assertIn("it is a symbolic link", err)


class KerasBackupAndRestore(Env):
    """What docs/frameworks.md says of Keras: BackupAndRestore restores by itself, at the start
    of the interrupted epoch; with double_checkpoint a weights file cut short falls back to
    the previous backup, without it fit() fails."""

    def setUp(self):
        super().setUp()
        need.require_modules("torch", "keras")
        os.environ.setdefault("KERAS_BACKEND", "torch")
        import keras
        import numpy as np

        self.keras = keras
        rng = np.random.default_rng(0)
        self.x, self.y = rng.random((64, 4)), rng.random((64, 3))

    def fit(self, backup_dir, epochs, double):
        model = self.keras.Sequential([self.keras.Input((4,)), self.keras.layers.Dense(3)])
        model.compile(optimizer="adam", loss="mse")
        epochs_seen = []
        seen = self.keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: epochs_seen.append(epoch))
        backup = self.keras.callbacks.BackupAndRestore(backup_dir, double_checkpoint=double, delete_checkpoint=False)
        model.fit(self.x, self.y, epochs=epochs, batch_size=16, verbose=0, callbacks=[backup, seen])
        return epochs_seen

    def test_a_weights_file_cut_short_falls_back_to_the_previous_backup_only_with_double_checkpoint(self):
        for double in (True, False):
            backup_dir = os.path.join(self.dir, "backup-%s" % double)
            self.assertEqual(self.fit(backup_dir, 3, double), [0, 1, 2])
            weights = os.path.join(backup_dir, "latest.weights.h5")
            cut(weights, weights, os.path.getsize(weights) // 2)
            if double:
                # the previous backup was taken at the end of epoch 1: epoch 2 is trained again
                self.assertEqual(self.fit(backup_dir, 5, double), [2, 3, 4])
            else:
                with self.assertRaises(OSError):
                    self.fit(backup_dir, 5, double)


if __name__ == "__main__":
    unittest.main()
