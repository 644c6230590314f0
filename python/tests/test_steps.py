"""The step reports (training_watchdog.allocator) through the fake allocator (fake_allocator.py).

The file against docs/recording.md ("The step reports"), folding, ``n`` and the rewrite
while the watchdog has not read, passes, the rate limit, the exception, that the package
never imports torch, and each framework callback in its real framework on the CPU
reporting its phases and saving at the start of an evaluation when a request is pending.

Needs torch (and Lightning, Transformers, Keras for their tests): fails when CI is set and
skips otherwise (need.py).
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
sys.path.insert(0, PYTHON_DIR)

import need  # noqa: E402
import training_watchdog as tw  # noqa: E402
from training_watchdog import allocator  # noqa: E402
from training_watchdog.distributed import Agreement  # noqa: E402

MiB = 1 << 20
ENV_KEYS = ("WATCHDOG_REQUEST_FILE", "WATCHDOG_INTERVAL", "WATCHDOG_SIGNAL", "WATCHDOG_PID", "WORLD_SIZE")


def documented_fields():
    """The field names of the step-report table in docs/recording.md."""
    with open(os.path.join(PYTHON_DIR, "..", "docs", "recording.md")) as f:
        doc = f.read()
    section = doc.split("### The step reports", 1)[1].split("\n### ", 1)[0]
    fields = set()
    for line in section.splitlines():
        m = re.match(r"\|\s*(`[^|]+)\|", line)
        if m:
            fields.update(re.findall(r"`([a-z_]+)`", m.group(1)))
    return fields


class Steps(unittest.TestCase):
    """Each test: a request file in a temp dir, fresh client state, the fake allocator installed."""

    shape = "steady"

    def setUp(self):
        need.require_modules("torch")
        import torch  # noqa: F401  (the process's torch, as in a training script)
        from fake_allocator import FakeAllocator

        self.saved_env = {k: os.environ.get(k) for k in ENV_KEYS}
        for k in ENV_KEYS:
            os.environ.pop(k, None)
        self.dir = tempfile.TemporaryDirectory(prefix="tw-steps-")
        self.request = os.path.join(self.dir.name, "request.json")
        self.steps_file = self.request + ".steps"
        os.environ["WATCHDOG_REQUEST_FILE"] = self.request
        os.environ["WATCHDOG_INTERVAL"] = "0"
        tw._reset()
        allocator._reset()
        self.fake = FakeAllocator(self.shape).install()

    def tearDown(self):
        self.fake.restore()
        tw._reset()
        allocator._reset()
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.dir.cleanup()

    def read(self):
        with open(self.steps_file) as f:
            return json.load(f)

    def run_steps(self, phases, **kw):
        """One report per phase in ``phases`` (its fake step first); steps count per phase."""
        count = {}
        for phase in phases:
            self.fake.step(phase)
            step = count.get(phase, 0)
            count[phase] = step + 1
            self.assertTrue(tw.report_step(step, phase, **kw))

    def ask(self, seq=1):
        """Write a pending request, as the watchdog does."""
        with open(self.request, "w") as f:
            json.dump({"seq": seq, "time_unix": time.time(), "resource": "gpu0", "reason": "step_peak"}, f)


class FileFormat(Steps):
    def test_the_file_holds_what_docs_recording_md_says(self):
        self.run_steps(["train"] * 3, batch_size=8, tokens=4096)
        self.run_steps(["eval"] * 2)
        allocator.report_exception(_oom("CUDA out of memory. Tried to allocate 2.00 GiB " + "x" * 5000),
                                   step=3, phase="train")
        report = self.read()
        documented = documented_fields()
        self.assertEqual(set(report), {"pid", "device", "steps", "exception"})
        self.assertEqual(report["pid"], os.getpid())
        self.assertEqual(report["device"], {"index": 0, "uuid": "GPU-5a1b2c3d-0000-4000-8000-00000000abcd"})
        required = {"n", "step", "phase", "pass", "time_unix", "allocated", "reserved", "peak", "retries",
                    "ooms", "folded"}
        for e in report["steps"]:
            self.assertLessEqual(required, set(e), e)
            self.assertLessEqual(set(e), documented, "a field docs/recording.md does not list")
            for key in required - {"phase", "time_unix"}:
                self.assertIsInstance(e[key], int, key)
                self.assertNotIsInstance(e[key], bool, key)
        first, second = report["steps"][:2]
        self.assertNotIn("duration_s", first, "no duration for the first report of a pass")
        self.assertGreaterEqual(second["duration_s"], 0)
        self.assertEqual((first["batch_size"], first["tokens"]), (8, 4096))
        self.assertNotIn("batch_size", report["steps"][3], "absent when the caller gives none")
        self.assertEqual(first["allocated"], 1024 * MiB)
        self.assertEqual(first["peak"], 1536 * MiB, "the step's activations")
        self.assertEqual(first["reserved"], 1536 * MiB)
        self.assertEqual(report["steps"][3]["peak"], 1280 * MiB, "an evaluation step's own peak")
        exc = report["exception"]
        self.assertLessEqual(set(exc), {"kind", "step", "phase", "time_unix", "message", "allocated",
                                        "reserved", "peak"})
        self.assertEqual((exc["kind"], exc["step"], exc["phase"]), ("cuda_oom", 3, "train"))
        self.assertEqual(len(exc["message"]), 1000)
        self.assertEqual(exc["allocated"], 1024 * MiB)
        self.assertLessEqual(os.path.getsize(self.steps_file), allocator.MAX_FILE_BYTES)

    def test_a_uuid_already_spelled_as_nvml_does_is_kept_and_no_uuid_is_absent(self):
        self.assertEqual(allocator._uuid_text("GPU-abc"), "GPU-abc")
        self.assertIsNone(allocator._uuid_text(None))
        self.fake.uuid = None
        self.run_steps(["train"])
        self.assertEqual(self.read()["device"], {"index": 0})

    def test_batch_size_and_tokens_from_a_batch(self):
        import torch

        ids = torch.zeros(2, 128, dtype=torch.long)
        self.assertEqual(allocator.batch_shape({"input_ids": ids, "labels": ids}), (2, 256))
        self.assertEqual(allocator.batch_shape([torch.zeros(8, 4), torch.zeros(8, 1)]), (8, None))
        self.assertEqual(allocator.batch_shape({"x": torch.zeros(3, 4)}), (3, None))
        self.assertEqual(allocator.batch_shape("not a batch"), (None, None))
        self.assertEqual(allocator.batch_shape(torch.tensor(1.0)), (None, None))

    def test_bad_arguments_are_one_warning_never_an_exception(self):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            self.assertFalse(tw.report_step(1, phase="validation"))
            self.assertFalse(tw.report_step(1, phase="validation"))
            self.assertFalse(tw.report_step(None))
            self.assertFalse(tw.report_step(1.5))
        self.assertEqual(len(seen), 1, [str(w.message) for w in seen])
        self.assertIn("phase='validation'", str(seen[0].message))
        self.assertFalse(os.path.exists(self.steps_file))

    def test_a_step_the_watchdog_cannot_read_is_refused_and_does_not_stop_later_reports(self):
        # An infinite step raised OverflowError into the loop, and a step past 2**64 - 1 was
        # written: the watchdog (u64) refused the whole file, which stayed unread and kept
        # every later entry, and the exception, from it.
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            self.assertFalse(tw.report_step(2 ** 64))
            self.assertFalse(tw.report_step(float("inf")))
            self.assertFalse(tw.report_step(1, batch_size=2 ** 64))
            self.assertFalse(tw.report_step(1, tokens=float("inf")))
            self.assertFalse(tw.report_step(True))  # a bool is no step (acknowledge refuses it too)
        self.assertIn("2**64", str(seen[0].message), [str(w.message) for w in seen])
        self.fake.step("train")
        self.assertTrue(tw.report_step(2 ** 64 - 1))
        self.assertEqual([e["step"] for e in self.read()["steps"]], [2 ** 64 - 1])

    def test_a_failing_allocator_is_one_warning_even_under_w_error(self):
        def broken(device=None):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

        import torch

        torch.cuda.memory_stats = broken
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for step in range(3):
                self.assertFalse(tw.report_step(step))

    def test_a_symlink_in_place_of_the_file_is_not_followed(self):
        target = os.path.join(self.dir.name, "elsewhere")
        os.symlink(target, self.steps_file)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            self.assertFalse(tw.report_step(1))
        self.assertFalse(os.path.exists(target))


class Delivery(Steps):
    def test_every_entry_since_the_watchdogs_last_read_is_in_the_file(self):
        self.run_steps(["train"] * 3)
        self.assertEqual([e["n"] for e in self.read()["steps"]], [1, 2, 3],
                         "while the file is unread it is rewritten with the old entries and the new")
        os.unlink(self.steps_file)  # what the watchdog does once it has read it
        self.run_steps(["train"] * 2)
        self.assertEqual([e["n"] for e in self.read()["steps"]], [4, 5], "n goes on; read entries are gone")

    def test_a_rewrite_of_a_file_taken_unseen_says_by_phase_n_which_steps_are_new(self):
        # The race two ranks met in CI: the client found its file still there, the watchdog
        # took it, and the rewrite folded the entries taken together with new ones into one
        # entry of a later n. phase_n (each phase's running count) tells the new steps apart.
        self.run_steps(["train"] * 90 + ["eval"] * 3)
        taken = self.read()["steps"]  # read by the watchdog, which the client never sees
        self.run_steps(["train"] * 300 + ["eval"] * 2)
        steps = self.read()["steps"]
        last = {e["phase"]: e["phase_n"] for e in taken}
        self.assertEqual(last, {"train": 90, "eval": 3})
        new = 0
        for e in steps:
            if e["n"] <= taken[-1]["n"]:
                continue
            fresh = e["phase_n"] - last[e["phase"]]
            new += min(e["folded"], fresh)
            last[e["phase"]] = e["phase_n"]
        self.assertGreater(sum(e["folded"] for e in steps if e["n"] > taken[-1]["n"]), 302,
                           "the rewrite folds steps taken with new ones")
        self.assertEqual(new, 302)
        self.assertEqual({e["phase"]: e["phase_n"] for e in steps}, {"train": 390, "eval": 5})

    def test_one_of_several_ranks_writes_a_file_of_its_own(self):
        # Ranks share the request file: each writes <request file>.steps.<pid>; one process
        # (no WORLD_SIZE, 1, or not a number) writes .steps as before.
        for world, name in (("2", "%s.%d" % (self.steps_file, os.getpid())), ("1", self.steps_file),
                            (None, self.steps_file), ("two", self.steps_file)):
            os.environ.pop("WORLD_SIZE", None)
            if world is not None:
                os.environ["WORLD_SIZE"] = world
            self.run_steps(["train"])
            self.assertEqual([n for n in os.listdir(self.dir.name) if ".steps" in n],
                             [os.path.basename(name)], world)
            with open(name) as f:
                self.assertEqual(json.load(f)["pid"], os.getpid())
            os.unlink(name)  # read by the watchdog

    def test_at_most_256_entries_the_oldest_folded_per_phase_into_their_maximum(self):
        os.environ["WATCHDOG_INTERVAL"] = "3600"  # one write (the first), then none till flush
        phases = ["train"] * 20 + ["eval"] * 20 + ["train"] * 280
        self.fake.shape = "leak"
        self.run_steps(phases)
        allocator.flush()
        steps = self.read()["steps"]
        self.assertLessEqual(len(steps), allocator.MAX_ENTRIES)
        self.assertEqual(len(allocator._fold(steps + steps[:100])), allocator.MAX_ENTRIES)
        self.assertEqual(sum(e["folded"] for e in steps), len(phases))
        ns = [e["n"] for e in steps]
        self.assertEqual(ns, sorted(ns))
        self.assertEqual(ns[-1], len(phases))
        folded = [e for e in steps if e["folded"] > 1]
        self.assertEqual(sorted(e["phase"] for e in folded), ["eval", "train"], "one folded entry per phase")
        train = next(e for e in folded if e["phase"] == "train")
        # the leak: the folded training steps' largest figures are the last folded one's
        last_folded_train = max(e["n"] for e in folded if e["phase"] == "train")
        self.assertEqual(train["n"], last_folded_train)
        self.assertEqual(train["peak"], max(e["peak"] for e in folded if e["phase"] == "train"))
        self.assertGreater(train["peak"], steps[-1]["peak"] - 300 * 64 * MiB)
        self.assertLess(train["peak"], steps[-1]["peak"], "the leak grows: the newest peak is the largest")
        self.assertEqual(train["pass"], 2, "the last folded entry's pass")
        evals = next(e for e in folded if e["phase"] == "eval")
        self.assertEqual((evals["folded"], evals["step"]), (20, 19))

    def test_written_at_most_once_per_interval_then_flushed(self):
        os.environ["WATCHDOG_INTERVAL"] = "3600"
        self.run_steps(["train"] * 10)
        self.assertEqual([e["n"] for e in self.read()["steps"]], [1], "only the first report wrote")
        allocator.flush()
        self.assertEqual([e["n"] for e in self.read()["steps"]], list(range(1, 11)))
        os.environ["WATCHDOG_INTERVAL"] = "100ms"  # the binary's form is taken too
        self.assertEqual(allocator._interval(), 0.1)

    def test_a_file_left_unread_is_written_less_and_less_often(self):
        os.environ["WATCHDOG_INTERVAL"] = "0.1"
        self.run_steps(["train"])  # the first write
        waits = []
        for _ in range(8):
            allocator._state.last_write = None  # due now, whatever the clock says
            self.run_steps(["train"])
            waits.append(allocator._wait())
        self.assertEqual(waits, [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])
        os.unlink(self.steps_file)  # read at last
        allocator._state.last_write = None
        self.run_steps(["train"])
        self.assertEqual(allocator._wait(), 0.1)

    def test_an_exception_is_written_at_once_and_kept_until_read(self):
        os.environ["WATCHDOG_INTERVAL"] = "3600"
        self.run_steps(["train"] * 2)
        self.assertTrue(allocator.report_exception(_oom("CUDA out of memory."), step=2, phase="train"))
        report = self.read()
        self.assertEqual([e["n"] for e in report["steps"]], [1, 2])
        self.assertEqual(report["exception"]["step"], 2)
        self.assertFalse(allocator.report_exception(ValueError("not an OOM")))
        allocator.flush()  # nothing new: the file stays as it is
        os.environ["WATCHDOG_INTERVAL"] = "0"
        self.run_steps(["train"])
        self.assertIn("exception", self.read(), "kept while unread")
        os.unlink(self.steps_file)
        self.run_steps(["train"])
        self.assertNotIn("exception", self.read(), "read once: not sent again")

    def test_a_message_that_is_not_utf_8_is_written_as_utf_8(self):
        # A lone surrogate (a file name decoded with surrogateescape) was written as "\\udcff",
        # which the watchdog's JSON parser refuses: the whole file, the exception with it.
        text = "CUDA out of memory while loading " + os.fsdecode(b"/data/\xff.bin")
        self.assertTrue(allocator.report_exception(_oom(text), step=2, phase="train"))
        with open(self.steps_file, "rb") as f:
            raw = f.read()
        self.assertNotIn(b"\\udc", raw)
        message = json.loads(raw)["exception"]["message"]
        message.encode("utf-8")  # strict: no lone surrogate
        self.assertTrue(message.startswith("CUDA out of memory while loading /data/"), message)

    def test_passes_count_each_switch_into_a_phase(self):
        self.run_steps(["train", "train", "eval", "eval", "train", "eval", "other", "train"])
        got = [(e["phase"], e["pass"]) for e in self.read()["steps"]]
        self.assertEqual(got, [("train", 1), ("train", 1), ("eval", 1), ("eval", 1), ("train", 2),
                               ("eval", 2), ("other", 1), ("train", 3)])

    def test_the_peak_is_reset_between_steps_unless_asked_not_to(self):
        self.fake.shape = "leak"
        self.run_steps(["train"] * 3)
        self.assertEqual(self.fake.resets, 3)
        peaks = [e["peak"] for e in self.read()["steps"]]
        self.assertEqual([b - a for a, b in zip(peaks, peaks[1:])], [64 * MiB] * 2)
        self.run_steps(["eval"] * 2, reset_peak=False)
        self.assertEqual(self.fake.resets, 3)

    def test_nothing_without_a_request_file_until_there_is_one(self):
        os.environ.pop("WATCHDOG_REQUEST_FILE")
        self.run_steps(["train"] * 2)
        os.environ["WATCHDOG_REQUEST_FILE"] = self.request
        self.run_steps(["train"])
        self.assertEqual([e["n"] for e in self.read()["steps"]], [1, 2, 3])

    def test_nothing_before_cuda_is_initialized(self):
        self.fake.restore()
        self.assertFalse(tw.report_step(1))
        self.assertFalse(os.path.exists(self.steps_file))


def phases_and_passes(steps):
    """``[(phase, pass), ...]`` once per pass, in order."""
    out = []
    for e in steps:
        key = (e["phase"], e["pass"])
        if not out or out[-1] != key:
            out.append(key)
    return out


class Callbacks(Steps):
    """Each callback in its real framework on the CPU, its model's steps going through the fake."""

    def setUp(self):
        super().setUp()
        self.saved_handler = signal.getsignal(signal.SIGUSR1)

    def tearDown(self):
        signal.signal(signal.SIGUSR1, self.saved_handler)
        super().tearDown()

    def assert_acknowledged(self):
        with open(self.request + ".ack") as f:
            self.assertEqual(json.load(f)["seq"], 1)

    def lightning_fit(self, probe=None, extra_callbacks=(), logger=False, ckpt_path=None, **kw):
        import torch
        import lightning.pytorch as pl
        from training_watchdog.lightning import WatchdogCallback

        fake = self.fake

        class Model(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(4, 1)

            def training_step(self, batch, i):
                fake.step("train")
                return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

            def validation_step(self, batch, i):
                fake.step("eval")
                return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01)

        torch.manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
        train = torch.utils.data.DataLoader(data, batch_size=8)
        val = torch.utils.data.DataLoader(torch.utils.data.Subset(data, range(16)), batch_size=8)
        watchdog = WatchdogCallback(dirpath=os.path.join(self.dir.name, "ckpt"), **kw)
        callbacks = [watchdog] + ([probe(watchdog)] if probe else []) + list(extra_callbacks)
        trainer = pl.Trainer(max_epochs=2, accelerator="cpu", callbacks=callbacks, logger=logger,
                             enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=self.dir.name)
        trainer.fit(Model(), train, val, ckpt_path=ckpt_path)
        self.resumed_at = trainer.global_step
        return watchdog

    def test_lightning_reports_training_and_validation_and_saves_before_a_validation(self):
        need.require_modules("torch", "lightning")
        import lightning.pytorch as pl

        test = self

        class Probe(pl.Callback):
            """After the watchdog's callback: asks at the last training batch of the first
            epoch, after the watchdog looked, so the next point to save is the validation."""

            def __init__(self, watchdog):
                self.watchdog, self.saved_at_first_eval_batch = watchdog, None

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                if trainer.current_epoch == 0 and batch_idx == 3:
                    test.ask()

            def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
                if not trainer.sanity_checking and self.saved_at_first_eval_batch is None:
                    self.saved_at_first_eval_batch = list(self.watchdog.saved_steps)

        probes = []
        watchdog = self.lightning_fit(lambda w: probes.append(Probe(w)) or probes[-1])
        self.assertEqual(probes[0].saved_at_first_eval_batch, [4], "not saved before the validation")
        self.assertEqual(watchdog.saved_steps, [4])
        self.assert_acknowledged()
        import torch

        saved = torch.load(watchdog.last_path, weights_only=False)
        self.assertEqual((saved["global_step"], saved["epoch"]), (4, 0))
        # fit() resumes from it: the rest of the run (epoch 1's four steps) and nothing more
        class Start(pl.Callback):
            def on_train_start(self, trainer, pl_module):
                self.step = trainer.global_step

        start = Start()
        self.fake.restore()
        self.lightning_fit(extra_callbacks=[start], ckpt_path=watchdog.last_path)
        self.assertEqual((start.step, self.resumed_at), (4, 8))
        steps = self.read()["steps"]
        # sanity check (2 batches), epoch 0 (4 batches), its validation, epoch 1, its validation
        self.assertEqual(phases_and_passes(steps), [("eval", 1), ("train", 1), ("eval", 2), ("train", 2),
                                                    ("eval", 3)])
        self.assertEqual([e["step"] for e in steps if e["phase"] == "train"], list(range(1, 9)))
        self.assertEqual([e["step"] for e in steps if e["phase"] == "eval" and e["pass"] == 2], [0, 1])
        self.assertEqual({e.get("batch_size") for e in steps}, {8})
        self.assertEqual({e["peak"] for e in steps if e["phase"] == "train"}, {1536 * MiB})
        self.assertEqual({e["peak"] for e in steps if e["phase"] == "eval"}, {1280 * MiB})
        self.assertEqual(self.fake.resets, len(steps))

    def test_lightning_leaves_the_peak_to_device_stats_monitor(self):
        need.require_modules("torch", "lightning", "psutil")
        from lightning.pytorch.callbacks import DeviceStatsMonitor
        from lightning.pytorch.loggers import CSVLogger

        self.lightning_fit(extra_callbacks=[DeviceStatsMonitor()], logger=CSVLogger(self.dir.name))
        self.assertGreater(len(self.read()["steps"]), 0)
        self.assertEqual(self.fake.resets, 0)

    def transformers_train(self, probe=None, resume=None, **args):
        import torch
        from transformers import Trainer, TrainingArguments
        from training_watchdog.transformers import WatchdogCallback

        fake = self.fake

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(4, 1)

            def forward(self, x, labels=None):
                fake.step("train" if self.training else "eval")
                pred = self.net(x)
                return {"loss": torch.nn.functional.mse_loss(pred, labels), "logits": pred}

        class Data(torch.utils.data.Dataset):
            def __init__(self, n):
                g = torch.Generator().manual_seed(0)
                self.x, self.y = torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)

            def __len__(self):
                return len(self.x)

            def __getitem__(self, i):
                return {"x": self.x[i], "labels": self.y[i]}

        settings = dict(output_dir=os.path.join(self.dir.name, "out"), max_steps=8,
                        per_device_train_batch_size=8, per_device_eval_batch_size=8, eval_strategy="steps",
                        eval_steps=4, save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True,
                        dataloader_num_workers=0, disable_tqdm=True)
        settings.update(args)
        watchdog = WatchdogCallback()
        # The probe comes first: it asks at a step end before the watchdog's callback looks.
        callbacks = ([probe(watchdog)] if probe else []) + [watchdog]
        trainer = Trainer(model=Model(), args=TrainingArguments(**settings), train_dataset=Data(64),
                          eval_dataset=Data(16), callbacks=callbacks)
        trainer.train(resume_from_checkpoint=resume)
        return watchdog

    def test_transformers_reports_steps_and_evaluation_and_saves_before_an_evaluation(self):
        need.require_modules("torch", "transformers", "accelerate")
        from transformers import TrainerCallback

        test = self

        class Probe(TrainerCallback):
            def __init__(self, watchdog):
                self.watchdog, self.saved_at_first_eval_step = watchdog, None

            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == 4:
                    test.ask()  # an evaluation is due at this step (eval_steps=4)

            def on_prediction_step(self, args, state, control, **kwargs):
                if self.saved_at_first_eval_step is None:
                    self.saved_at_first_eval_step = list(self.watchdog.saved_steps)

        probes = []
        watchdog = self.transformers_train(lambda w: probes.append(Probe(w)) or probes[-1])
        self.assertEqual(probes[0].saved_at_first_eval_step, [4], "not saved before the evaluation")
        self.assertEqual(watchdog.saved_steps, [4])
        checkpoint = os.path.join(self.dir.name, "out", "checkpoint-4")
        self.assertTrue(os.path.exists(os.path.join(checkpoint, "trainer_state.json")), os.listdir(self.dir.name))
        with open(os.path.join(checkpoint, "trainer_state.json")) as f:
            self.assertEqual(json.load(f)["global_step"], 4)
        self.assert_acknowledged()
        steps = self.read()["steps"]
        self.assertEqual(phases_and_passes(steps), [("train", 1), ("eval", 1), ("train", 2), ("eval", 2)])
        self.assertEqual([e["step"] for e in steps if e["phase"] == "train"], list(range(1, 9)))
        self.assertEqual([e["step"] for e in steps if e["phase"] == "eval"], [0, 1, 0, 1])
        self.assertEqual({e["peak"] for e in steps if e["phase"] == "eval"}, {1280 * MiB})
        self.assertGreater(self.fake.resets, 0)

        class Start(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                self.step = state.global_step

        start = Start()
        self.fake.restore()
        self.transformers_train(lambda w: start, resume=checkpoint)
        self.assertEqual(start.step, 4, "train(resume_from_checkpoint=...) did not resume at step 4")

    def test_transformers_saves_before_an_epoch_end_evaluation(self):
        need.require_modules("torch", "transformers", "accelerate")
        from transformers import TrainerCallback

        test = self

        class Probe(TrainerCallback):
            def __init__(self, watchdog):
                self.watchdog, self.saved_at_first_eval_step = watchdog, None

            def on_epoch_end(self, args, state, control, **kwargs):
                if state.global_step == 8:
                    test.ask()  # after the step end looked, before the epoch's evaluation

            def on_prediction_step(self, args, state, control, **kwargs):
                if self.saved_at_first_eval_step is None:
                    self.saved_at_first_eval_step = list(self.watchdog.saved_steps)

        probes = []
        watchdog = self.transformers_train(lambda w: probes.append(Probe(w)) or probes[-1],
                                           eval_strategy="epoch", max_steps=16)
        self.assertEqual(probes[0].saved_at_first_eval_step, [8], "not saved before the evaluation")
        self.assertEqual(watchdog.saved_steps, [8])
        self.assertTrue(os.path.isdir(os.path.join(self.dir.name, "out", "checkpoint-8")))
        self.assert_acknowledged()

    def test_transformers_leaves_the_peak_to_its_memory_metrics(self):
        need.require_modules("torch", "transformers", "accelerate", "psutil")
        self.transformers_train(skip_memory_metrics=False)
        self.assertGreater(len(self.read()["steps"]), 0)
        self.assertEqual(self.fake.resets, 0)

    def test_keras_reports_batches_and_validation_and_saves_before_a_validation(self):
        need.require_modules("torch", "keras")
        os.environ.setdefault("KERAS_BACKEND", "torch")
        import keras
        import numpy as np
        from training_watchdog.keras import WatchdogCallback

        self.assertEqual(keras.backend.backend(), "torch")
        fake, test = self.fake, self

        class Through(keras.layers.Layer):
            def call(self, x, training=None):
                if not isinstance(x, keras.KerasTensor):  # a real batch, not the symbolic build
                    fake.step("train" if training else "eval")
                return x

        class Probe(keras.callbacks.Callback):
            """After the watchdog's callback: asks at the last batch of the first epoch."""

            def __init__(self, watchdog):
                super().__init__()
                self.watchdog, self.saves_at_first_eval_batch, self.epoch = watchdog, None, 0

            def on_epoch_begin(self, epoch, logs=None):
                self.epoch = epoch

            def on_train_batch_end(self, batch, logs=None):
                if self.epoch == 0 and batch == 7:
                    test.ask()

            def on_test_batch_begin(self, batch, logs=None):
                if self.saves_at_first_eval_batch is None:
                    self.saves_at_first_eval_batch = self.watchdog.saves

        keras.utils.set_random_seed(0)
        rng = np.random.default_rng(0)
        x, y = rng.standard_normal((64, 4)).astype("float32"), rng.standard_normal((64, 1)).astype("float32")
        model = keras.Sequential([keras.Input((4,)), Through(), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        backup = keras.callbacks.BackupAndRestore(os.path.join(self.dir.name, "backup"))
        watchdog = WatchdogCallback(backup=backup)
        probe = Probe(watchdog)
        model.fit(x, y, batch_size=8, epochs=2, verbose=0, validation_data=(x[:16], y[:16]),
                  callbacks=[backup, watchdog, probe])
        self.assertEqual(probe.saves_at_first_eval_batch, 1, "not saved before the validation")
        self.assertEqual(watchdog.last_saved, (0, None))
        self.assert_acknowledged()
        steps = self.read()["steps"]
        self.assertEqual(phases_and_passes(steps), [("train", 1), ("eval", 1), ("train", 2), ("eval", 2)])
        self.assertEqual([e["step"] for e in steps if e["phase"] == "train"], list(range(16)))
        self.assertEqual([e["step"] for e in steps if e["phase"] == "eval"], [0, 1, 0, 1])
        self.assertEqual({e["peak"] for e in steps if e["phase"] == "train"}, {1536 * MiB})


class TwoRanks(unittest.TestCase):
    def test_lightning_ddp_saves_before_a_validation_on_both_ranks_when_one_is_asked(self):
        need.require_modules("torch", "lightning")
        script = os.path.join(HERE, "frameworks", "steps_lightning_ranks.py")
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        for k in list(env):
            if k.startswith(("SLURM_", "WATCHDOG_")):
                del env[k]
        with tempfile.TemporaryDirectory(prefix="tw-steps-ranks-") as d:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                   script, d]
            proc = subprocess.Popen(cmd, cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
            try:
                out, _ = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                self.fail("torchrun hung (a rank waited for the other at the validation's start?)\n" + out[-4000:])
            self.assertEqual(proc.returncode, 0, out[-4000:])
            ranks = []
            for rank in (0, 1):
                with open(os.path.join(d, "rank%d.json" % rank)) as f:
                    ranks.append(json.load(f))
                # One rank of two (WORLD_SIZE=2): its own file, named by its PID.
                names = [n for n in os.listdir(d) if n.startswith("request-rank%d.json.steps." % rank)]
                self.assertEqual(len(names), 1, names)
                with open(os.path.join(d, names[0])) as f:
                    steps = json.load(f)["steps"]
                self.assertEqual(phases_and_passes(steps), [("train", 1), ("eval", 1), ("train", 2), ("eval", 2)])
                evals = [e["peak"] for e in steps if e["phase"] == "eval"]
                self.assertLess(evals[0], evals[-1], "the fake's evaluation peak grows")
            for r in ranks:
                self.assertEqual(r["world_size"], 2)
                self.assertEqual(r["saved_steps"], [4], ranks)
                self.assertEqual(r["saved_at_first_eval_batch"], [4], "not saved before the validation")
                self.assertEqual(r["final_step"], 8)
            self.assertTrue(os.path.exists(ranks[0]["checkpoint"]), ranks)
            self.assertTrue(os.path.exists(os.path.join(d, "request-rank1.json.ack")))
            self.assertFalse(os.path.exists(os.path.join(d, "request-rank0.json.ack")))


class Agreements(unittest.TestCase):
    def test_requested_now_agrees_whatever_the_step(self):
        calls = []
        agreement = Agreement(10, reduce_any=lambda flag: calls.append(flag) or True, world_size=2)
        self.assertFalse(agreement.requested(3), "no collective between the every-th steps")
        self.assertTrue(agreement.requested_now())
        self.assertEqual(len(calls), 1)


class NoTorch(unittest.TestCase):
    def test_the_package_never_imports_torch(self):
        with tempfile.TemporaryDirectory() as d:
            code = (
                "import sys; sys.path.insert(0, %r)\n"
                "import training_watchdog as tw\n"
                "from training_watchdog import allocator\n"
                "assert tw.report_step(1) is False\n"
                "assert allocator.report_exception(MemoryError('CUDA out of memory')) in (True, False)\n"
                "allocator.flush()\n"
                "assert 'torch' not in sys.modules, 'torch was imported'\n" % PYTHON_DIR
            )
            env = dict(os.environ, WATCHDOG_REQUEST_FILE=os.path.join(d, "r.json"))
            proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                  timeout=60)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(os.path.join(d, "r.json.steps")) as f:
                report = json.load(f)
            self.assertEqual(report["steps"], [])
            self.assertNotIn("device", report, "no torch: no device")
            self.assertEqual(report["exception"]["kind"], "cuda_oom")


class AttachSetsTheInterval(unittest.TestCase):
    def test_attach_sets_watchdog_interval_and_stop_puts_it_back(self):
        binary = need.watchdog_bin()
        saved = os.environ.pop("WATCHDOG_INTERVAL", None)
        tw._reset()
        try:
            h = tw.attach(watchdog=binary, interval="20ms", dry_run=True, gpu="off")
            self.assertEqual(os.environ.get("WATCHDOG_INTERVAL"), "0.02")
            h.stop()
            self.assertNotIn("WATCHDOG_INTERVAL", os.environ)
            h = tw.attach(watchdog=binary, dry_run=True, gpu="off")
            self.assertNotIn("WATCHDOG_INTERVAL", os.environ, "no interval given: the client's default")
            h.stop()
        finally:
            tw._reset()
            if saved is not None:
                os.environ["WATCHDOG_INTERVAL"] = saved


# One rank of two under a launcher (WORLD_SIZE=2, as torchrun sets it). Both start together
# and report STEPS training steps through the fake allocator, writing at every step while
# the watchdog reads once a second: one shared file would hold one rank's entries at each
# read, and the other rank would drop its own when it found the file gone. Then a CUDA
# out-of-memory error at step 1000 + rank, rank 1's right after rank 0's (it waits for rank
# 0's marker), so that one shared file would be replaced before the watchdog read rank 0's.
RANK_SCRIPT = r"""
import os, sys, time
sys.path[:0] = sys.argv[1:3]
import torch
from fake_allocator import FakeAllocator
import training_watchdog as tw
from training_watchdog import allocator
rank, markers, steps = int(os.environ["RANK"]), sys.argv[3], int(sys.argv[4])
os.environ["WATCHDOG_INTERVAL"] = "0"
def mark(what):
    open(os.path.join(markers, "%s.%d" % (what, rank)), "w").close()
def wait(what, other):
    while not os.path.exists(os.path.join(markers, "%s.%d" % (what, other))):
        time.sleep(0.0005)
fake = FakeAllocator("steady").install()
mark("ready")
wait("ready", 1 - rank)
for step in range(steps):
    fake.step("train")
    tw.report_step(step)
    time.sleep(0.003)
allocator.flush()
if rank == 1:
    wait("oom", 0)
allocator.report_exception(torch.OutOfMemoryError("CUDA out of memory (rank %d)" % rank),
                           step=1000 + rank, phase="train")
mark("oom")
time.sleep(1.5)
"""

LAUNCHER = r"""
import os, subprocess, sys
procs = [subprocess.Popen([sys.executable] + sys.argv[1:],
                          env=dict(os.environ, WORLD_SIZE="2", RANK=str(r), LOCAL_RANK=str(r)))
         for r in range(2)]
sys.exit(max(p.wait() for p in procs))
"""


class SeveralRanks(unittest.TestCase):
    """Two ranks of one run share the request file: each one's reports reach the watchdog."""

    STEPS = 1000

    def test_two_ranks_reports_and_errors_each_reach_the_watchdog(self):
        need.require_modules("torch")
        binary = need.watchdog_bin()
        with tempfile.TemporaryDirectory(prefix="tw-ranks-") as d:
            events = os.path.join(d, "events.jsonl")
            request = os.path.join(d, "request.json")
            rank = os.path.join(d, "rank.py")
            with open(rank, "w") as f:
                f.write(RANK_SCRIPT)
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith("WATCHDOG_") and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
            markers = os.path.join(d, "markers")
            os.mkdir(markers)
            cmd = [binary, "-v", "--gpu", "off", "--interval", "1s", "--events", events,
                   "--request-file", request, "run", "--", sys.executable, "-c", LAUNCHER,
                   rank, PYTHON_DIR, HERE, markers, str(self.STEPS)]
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
            with open(events) as f:
                kinds = [json.loads(line) for line in f if line.strip()]
            taken = {}
            for m in re.finditer(r"step reports: \d+ new from PID (\d+) \((\d+) steps\)", p.stderr):
                taken[m.group(1)] = taken.get(m.group(1), 0) + int(m.group(2))
            self.assertEqual(sorted(taken.values()), [self.STEPS, self.STEPS], p.stderr[-3000:])
            ooms = sorted(e.get("step") for e in kinds if e.get("event") == "cuda_oom")
            self.assertEqual(ooms, [1000, 1001], p.stderr[-3000:])
            self.assertEqual([n for n in os.listdir(d) if ".steps" in n], [], "every file was read and removed")


def _oom(message):
    import torch

    return torch.OutOfMemoryError(message)


if __name__ == "__main__":
    unittest.main()
