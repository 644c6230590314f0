"""The training side of scripts/gpu-check.sh: one case per invocation, run under the watchdog.

    python3 workloads.py CASE --out RESULT.json --dir WORKDIR [--cpu]

CASE is one of ``probe``, ``leak``, ``eval``, ``oom``, ``resume``, ``lightning``,
``lightning-resume``, ``transformers``, ``transformers-resume``, ``figures``. Each writes what
it saw to RESULT.json as it goes (rewritten whole after every fact, so a case that crashes or
is killed by its time cap still leaves what it learned), and check.py judges it. A case that
runs into a CUDA out-of-memory error lets it end the process (status 1), as in a real run, so
the watchdog's verdict can be read.

Memory comes from the device's free memory (torch.cuda.mem_get_info), so the cases fit any
GPU. ``--cpu`` runs on the CPU: the only case that means anything there is ``oom`` (the
last-chance save of a raised torch.OutOfMemoryError, which CPU builds of torch have).

Self-test only: with GPU_CHECK_FAKE_CUDA=1 (set by check.py when the fake NVML library is
given, never otherwise) the "device" is a fake allocator on the CPU (fake_cuda.py); every
figure is then made up and check.py labels every result as such.
"""

import argparse
import hashlib
import json
import os
import sys
import time

RESULT = {}
OUT = None
MIB = 1 << 20


def note(**facts):
    """Add FACTS to the result file, rewritten atomically."""
    RESULT.update(facts)
    tmp = OUT + ".tmp"
    with open(tmp, "w") as f:
        json.dump(RESULT, f, default=str)
    os.replace(tmp, OUT)


def missing_api(tw, names):
    """The names among NAMES (dotted from training_watchdog) that this client lacks. A
    framework's module that cannot be imported because the framework is not installed is
    not the client's lack: that framework's case says it was skipped."""
    out = []
    for name in names:
        obj = tw
        for part in name.split("."):
            if part in ("lightning", "transformers") and obj is tw:
                try:
                    obj = __import__("training_watchdog." + part, fromlist=["x"])
                    continue
                except ModuleNotFoundError as e:
                    if (e.name or "").split(".")[0] == part:
                        break  # the framework is absent, not the client's module
                    obj = None
                    out.append("%s (%s)" % (name, e))
                    break
                except Exception as e:  # noqa: BLE001 - reported, never raised
                    obj = None
                    out.append("%s (%s)" % (name, e))
                    break
            obj = getattr(obj, part, None)
            if obj is None:
                out.append(name)
                break
    return out


def require_api(tw, names):
    gone = missing_api(tw, names)
    if gone:
        note(missing_api=gone)
        sys.exit(3)


class Device:
    """The CUDA device the cases use (or the CPU, or the self-test's fake allocator)."""

    def __init__(self, torch, cpu):
        self.torch = torch
        self.fake = os.environ.get("GPU_CHECK_FAKE_CUDA") == "1"
        if self.fake:
            import fake_cuda

            self.allocator = fake_cuda.install(torch)
        self.cpu = cpu
        self.device = torch.device("cpu") if (cpu or self.fake) else torch.device("cuda", torch.cuda.current_device())

    def mem_get_info(self):
        return self.torch.cuda.mem_get_info()

    def alloc(self, nbytes):
        """NBYTES of device memory, as a tensor: the allocation a step would make."""
        if self.fake:
            return self.allocator.alloc(nbytes)
        return self.torch.empty(int(nbytes), dtype=self.torch.uint8, device=self.device)

    def sync(self):
        if not (self.cpu or self.fake):
            self.torch.cuda.synchronize()

    def raise_oom(self):
        """A CUDA out-of-memory error raised where a step would raise it."""
        if self.cpu:
            raise oom_error(self.torch)(
                "CUDA out of memory. Tried to allocate 2.00 GiB (raised on the CPU by scripts/gpu-check)")
        free, total = self.mem_get_info()
        return self.alloc(total + free)  # more than the device has: the allocator raises


def oom_error(torch):
    """torch.OutOfMemoryError (torch 2.5 on), else torch.cuda.OutOfMemoryError (1.13 on)."""
    return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def is_oom(torch, e):
    return isinstance(e, oom_error(torch)) or "out of memory" in str(e).lower()


def state_digest(state_dict):
    h = hashlib.sha256()
    for k in sorted(state_dict):
        v = state_dict[k]
        h.update(k.encode())
        h.update(repr(v.detach().cpu().tolist()).encode())   # no numpy needed
    return h.hexdigest()[:16]


def seen_request(tw, step, phase=None):
    """Record the pending request (its reason, step, phase, predicted peak) the first time."""
    req = tw.request() or {}
    requests = RESULT.get("requests", [])
    requests.append({"seen_at_step": step, "seen_in_phase": phase, "evals_done": RESULT.get("evals_done", 0),
                     "seq": req.get("seq"),
                     "reason": req.get("reason"), "resource": req.get("resource"),
                     "phase": req.get("phase"), "step": req.get("step"),
                     "predicted_peak": req.get("predicted_peak"), "time": time.time()})
    note(requests=requests)


def ack_file(tw):
    path = tw.request_file()
    if not path:
        return None
    try:
        with open(str(path) + ".ack") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": str(e)}


def save_small(torch, path, step):
    torch.save({"step": step}, path)
    return path


def case_probe(args):
    facts = {"python": sys.version.split()[0]}
    try:
        import training_watchdog as tw

        facts["client"] = os.path.dirname(tw.__file__)
        facts["client_missing"] = missing_api(tw, ["report_step", "last_chance", "transformers.last_chance"])
        facts["acknowledge_args"] = _accepts(tw.acknowledge, ("path", "step", "cause"))
    except Exception as e:  # noqa: BLE001
        facts["client_error"] = "%s: %s" % (type(e).__name__, e)
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
        facts["has_oom_error"] = hasattr(torch, "OutOfMemoryError") or hasattr(torch.cuda, "OutOfMemoryError")
        fake = os.environ.get("GPU_CHECK_FAKE_CUDA") == "1"
        if fake:
            Device(torch, cpu=False)
        facts["cuda_available"] = fake or bool(torch.cuda.is_available())
        if facts["cuda_available"]:
            i = torch.cuda.current_device()
            p = torch.cuda.get_device_properties(i)
            facts["device"] = {"index": i, "name": p.name, "total": p.total_memory,
                               "uuid": str(getattr(p, "uuid", "") or "")}
            free, total = torch.cuda.mem_get_info()
            facts["device"].update(free=free, mem_total=total)
            facts["alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    except Exception as e:  # noqa: BLE001
        facts["torch_error"] = "%s: %s" % (type(e).__name__, e)
    for mod in ("lightning", "transformers"):
        try:
            facts[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            facts[mod + "_error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
    note(**facts)


def _accepts(fn, names):
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return all(n in params for n in names)


def case_leak(args, torch, tw, dev):
    """(a) A tensor leaked every step until the allocator fails; save when asked."""
    require_api(tw, ["report_step"])
    tw.install()
    free, total = dev.mem_get_info()
    chunk = max(free // 80, MIB)   # the OOM comes with the device over 98% full
    note(free=free, total=total, chunk=chunk, step_s=args.step_s)
    leaked = []
    deadline = time.monotonic() + args.cap
    step = 0
    try:
        while time.monotonic() < deadline:
            step += 1
            note(step=step)
            leaked.append(dev.alloc(chunk))       # kept: the leak
            tmp = dev.alloc(chunk // 2)           # the step's transient: its peak is above allocated
            del tmp
            dev.sync()
            time.sleep(args.step_s)
            tw.report_step(step, phase="train", batch_size=8)
            if tw.checkpoint_requested():
                seen_request(tw, step, "train")
                path = save_small(torch, os.path.join(args.dir, "leak-step%d.pt" % step), step)
                tw.acknowledge(path=path, step=step)
                note(saved=RESULT.get("saved", []) + [{"step": step, "path": path, "ack": ack_file(tw)}])
        note(no_oom_within_s=args.cap)
    except Exception as e:
        if is_oom(torch, e):
            note(oom_step=step, oom_message=str(e)[:300], leaked_bytes=len(leaked) * chunk)
        else:
            note(error="%s: %s" % (type(e).__name__, str(e)[:300]), error_step=step)
        raise


def case_eval(args, torch, tw, dev):
    """(b) Training fits; each evaluation holds more than the one before; the 5th would not fit."""
    require_api(tw, ["report_step"])
    tw.install()
    free, total = dev.mem_get_info()
    fail_at = 5
    unit = int(free / (fail_at - 0.5))     # eval k holds k * unit: eval 4 fits (89%), eval 5 does not (111%)
    train_bytes = max(free // 50, MIB)
    note(free=free, total=total, eval_unit=unit, planned_failing_eval=fail_at, train_bytes=train_bytes)
    step = 0
    evaluation = 0
    try:
        for evaluation in range(1, fail_at + 2):
            for _ in range(10):
                step += 1
                tmp = dev.alloc(train_bytes)
                del tmp
                dev.sync()
                time.sleep(args.step_s)
                tw.report_step(step, phase="train", batch_size=8)
                if tw.checkpoint_requested():
                    seen_request(tw, step, "train")
                    path = save_small(torch, os.path.join(args.dir, "eval-step%d.pt" % step), step)
                    tw.acknowledge(path=path, step=step)
                    note(saved=RESULT.get("saved", []) + [{"step": step, "before_eval": None}])
            # the start of an evaluation: where a callback saves when a request is pending
            time.sleep(args.step_s * 3)   # leave the watchdog a few intervals to read the last reports
            if tw.checkpoint_requested():
                seen_request(tw, step, "before_eval_%d" % evaluation)
                path = save_small(torch, os.path.join(args.dir, "eval-before%d.pt" % evaluation), step)
                tw.acknowledge(path=path, step=step)
                note(saved=RESULT.get("saved", []) + [{"step": step, "before_eval": evaluation}])
            note(evaluation=evaluation)
            held = dev.alloc(unit * evaluation)
            for batch in range(3):
                tmp = dev.alloc(train_bytes)
                del tmp
                dev.sync()
                time.sleep(args.step_s)
                tw.report_step(batch, phase="eval")
            del held
            note(evals_done=evaluation)
        note(no_oom=True)
    except Exception as e:
        if is_oom(torch, e):
            note(oom_eval=evaluation, oom_message=str(e)[:300])
        else:
            note(error="%s: %s" % (type(e).__name__, str(e)[:300]))
        raise


def _model(torch, dev):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(dev.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, opt


def _train_step(torch, dev, model, opt, step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 64, generator=g).to(dev.device)
    y = torch.randn(32, 1, generator=g).to(dev.device)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return float(loss)


def case_oom(args, torch, tw, dev):
    """(c) A CUDA OOM at step 5 of a plain loop, inside training_watchdog.last_chance(save)."""
    require_api(tw, ["report_step", "last_chance"])
    tw.install()
    model, opt = _model(torch, dev)
    path = os.path.join(args.dir, "last-chance.pt")
    state = {"step": 0}
    fail_at = 5

    def allocated():
        return None if dev.cpu else torch.cuda.memory_allocated()

    def failing_step():
        """A step that holds half the free memory when its next allocation fails: the
        last-chance save should find that half given back (the traceback held it)."""
        if not dev.cpu:
            free, _ = dev.mem_get_info()
            activations = dev.alloc(free // 2)   # noqa: F841 - held by this frame until the error
            note(step_held=free // 2)
        dev.raise_oom()

    def save():
        note(allocated_at_save=allocated())
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": state["step"]}, path)
        note(saved_path=path, saved_step=state["step"], saved_digest=state_digest(model.state_dict()))
        return path

    try:
        with tw.last_chance(save) as run:
            for step in range(1, 100):
                if step == fail_at:
                    note(oom_step=step, allocated_before_step=allocated())
                    failing_step()
                _train_step(torch, dev, model, opt, step)
                state["step"] = step
                if run is not None:
                    run.step = step      # the step the checkpoint holds, for the ack
                tw.report_step(step, phase="train", batch_size=32)
        note(no_oom=True)
    except BaseException as e:
        note(reraised="%s: %s" % (type(e).__name__, str(e)[:200]), reraised_oom=is_oom(torch, e),
             ack=ack_file(tw), checkpoint_exists=os.path.exists(path))
        raise


def case_resume(args, torch, tw, dev):
    """Load the last-chance checkpoint in a new process and train one more step on the device."""
    ckpt = torch.load(args.ckpt, map_location=dev.device)
    model, opt = _model(torch, dev)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    note(loaded_step=ckpt["step"], loaded_digest=state_digest(model.state_dict()))
    loss = _train_step(torch, dev, model, opt, ckpt["step"] + 1)
    note(continued_to=ckpt["step"] + 1, loss=loss, loss_finite=loss == loss and abs(loss) < 1e30)


def _lightning_module(torch, dev, fail_at):
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(64, 1)

        def training_step(self, batch, batch_idx):
            if fail_at and self.global_step + 1 == fail_at:
                note(oom_step=fail_at)
                dev.raise_oom()
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Module()


def _loader(torch):
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(512, 64, generator=g), torch.randn(512, 1, generator=g))
    return torch.utils.data.DataLoader(data, batch_size=16)


def _trainer(dev, max_steps, callbacks, root):
    import lightning.pytorch as pl

    gpu = not (dev.cpu or dev.fake)
    return pl.Trainer(accelerator="gpu" if gpu else "cpu", devices=1, max_steps=max_steps, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                      callbacks=callbacks, default_root_dir=root)


def case_lightning(args, torch, tw, dev):
    """(c) Lightning: a CUDA OOM in training_step at step 5, saved by WatchdogCallback.on_exception."""
    from training_watchdog.lightning import WatchdogCallback

    import lightning.pytorch as pl

    if getattr(WatchdogCallback, "on_exception", None) is getattr(pl.Callback, "on_exception", None):
        note(missing_api=["lightning.WatchdogCallback.on_exception"])
        sys.exit(3)
    ckdir = os.path.join(args.dir, "lightning")
    cb = WatchdogCallback(dirpath=ckdir)
    trainer = _trainer(dev, 50, [cb], args.dir)
    try:
        trainer.fit(_lightning_module(torch, dev, 5), _loader(torch))
        note(no_oom=True)
    except BaseException as e:
        note(reraised="%s: %s" % (type(e).__name__, str(e)[:200]), reraised_oom=is_oom(torch, e),
             ack=ack_file(tw), checkpoints=sorted(os.listdir(ckdir)) if os.path.isdir(ckdir) else [],
             last_path=cb.last_path)
        raise


def case_lightning_resume(args, torch, tw, dev):
    ckpt = torch.load(args.ckpt, map_location="cpu", weights_only=False)
    step = int(ckpt.get("global_step", -1))
    trainer = _trainer(dev, step + 1, [], args.dir)
    trainer.fit(_lightning_module(torch, dev, 0), _loader(torch), ckpt_path=args.ckpt)
    note(loaded_step=step, continued_to=trainer.global_step)


def _hf_model(torch):
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(64, 1)

        def forward(self, x=None, labels=None):
            out = self.net(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    torch.manual_seed(0)
    return Tiny()


class _Data:
    def __init__(self, torch):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(512, 64, generator=g)
        self.y = torch.randn(512, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


def _hf_trainer(torch, dev, max_steps, out, fail_at):
    from transformers import Trainer, TrainingArguments, TrainerCallback

    class FailAt(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if fail_at and state.global_step + 1 == fail_at:
                note(oom_step=fail_at)
                dev.raise_oom()

    gpu = not (dev.cpu or dev.fake)
    targs = TrainingArguments(output_dir=out, max_steps=max_steps, per_device_train_batch_size=16,
                              report_to=[], save_strategy="no", logging_strategy="no",
                              use_cpu=not gpu, disable_tqdm=True, dataloader_num_workers=0)
    from training_watchdog.transformers import WatchdogCallback

    return Trainer(model=_hf_model(torch), args=targs, train_dataset=_Data(torch),
                   callbacks=[WatchdogCallback(), FailAt()])


def case_transformers(args, torch, tw, dev):
    """(c) Transformers: a CUDA OOM at step 5, saved by training_watchdog.transformers.last_chance."""
    require_api(tw, ["transformers.last_chance"])
    import training_watchdog.transformers as twt

    out = os.path.join(args.dir, "hf")
    trainer = _hf_trainer(torch, dev, 50, out, 5)
    try:
        with twt.last_chance(trainer):
            trainer.train()
        note(no_oom=True)
    except BaseException as e:
        note(reraised="%s: %s" % (type(e).__name__, str(e)[:200]), reraised_oom=is_oom(torch, e),
             ack=ack_file(tw), checkpoints=sorted(os.listdir(out)) if os.path.isdir(out) else [])
        raise


def case_transformers_resume(args, torch, tw, dev):
    with open(os.path.join(args.ckpt, "trainer_state.json")) as f:
        step = int(json.load(f)["global_step"])
    trainer = _hf_trainer(torch, dev, step + 1, os.path.join(args.dir, "hf-resume"), 0)
    trainer.train(resume_from_checkpoint=args.ckpt)
    note(loaded_step=step, continued_to=trainer.state.global_step)


def case_figures(args, torch, tw, dev):
    """(d) Hold a quarter of the free memory still; take torch's and nvidia-smi's figures meanwhile;
    time memory_stats()."""
    import subprocess

    free0, total = dev.mem_get_info()
    held = dev.alloc(free0 // 4)
    dev.sync()
    note(held=free0 // 4, pid=os.getpid())
    time.sleep(1.0)   # several watchdog samples of the steady device
    free, total = dev.mem_get_info()
    note(torch_free=free, torch_total=total, torch_time=time.time())
    smi = os.environ.get("GPU_CHECK_FAKE_NVIDIA_SMI", "nvidia-smi")
    try:
        r = subprocess.run([smi, "--query-gpu=uuid,index,memory.used,memory.total", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
        note(smi_status=r.returncode, smi_out=r.stdout, smi_err=r.stderr[-300:], smi_time=time.time())
    except (OSError, subprocess.TimeoutExpired) as e:
        note(smi_error=str(e))
    free2, _ = dev.mem_get_info()
    note(torch_free_after=free2)
    time.sleep(0.5)
    times = []
    pc = time.perf_counter_ns
    stats = torch.cuda.memory_stats
    for _ in range(1000):
        t0 = pc()
        stats()
        times.append(pc() - t0)
    times.sort()
    note(stats_mean_us=sum(times) / len(times) / 1000.0, stats_p99_us=times[989] / 1000.0,
         stats_calls=len(times))
    del held


CASES = {"leak": case_leak, "eval": case_eval, "oom": case_oom, "resume": case_resume,
         "lightning": case_lightning, "lightning-resume": case_lightning_resume,
         "transformers": case_transformers, "transformers-resume": case_transformers_resume,
         "figures": case_figures}


def main():
    global OUT
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=["probe"] + sorted(CASES))
    p.add_argument("--out", required=True)
    p.add_argument("--dir", default=".")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--cap", type=float, default=60.0)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--ckpt")
    args = p.parse_args()
    OUT = args.out
    note(case=args.case, started=time.time(), pid=os.getpid())
    pidfile = os.environ.get("GPU_CHECK_FAKE_PIDFILE")   # self-test: the fake NVML lists this process
    if pidfile:
        with open(pidfile, "w") as f:
            f.write(str(os.getpid()))
    if args.case == "probe":
        case_probe(args)
        return
    import torch
    import training_watchdog as tw

    dev = Device(torch, args.cpu)
    note(device=str(dev.device), fake=dev.fake)
    try:
        CASES[args.case](args, torch, tw, dev)
    except Exception as e:
        # an error the case did not expect (an import, a framework's API): said as such
        if "error" not in RESULT and "reraised" not in RESULT and not is_oom(torch, e):
            note(error="%s: %s" % (type(e).__name__, str(e)[:300]))
        raise
    note(finished=time.time())


if __name__ == "__main__":
    main()
