"""The driver of scripts/gpu-check.sh: run each case under the watchdog, judge it, print one table.

    python3 check.py --bin WATCHDOG --repo REPO [--work DIR]

Standard library only (torch is imported by workloads.py, in the cases' own processes). Each
case is one process tree (``watchdog run -- python3 workloads.py CASE``) in its own session,
ended by its time cap, so its GPU memory is given back whatever happens. A case is ``pass``
only when everything it promises was seen; otherwise ``FAILED`` with what was missing, or
``skipped`` with why (a framework not installed). Exit status 1 when a case failed, else 0.

Self-test only (GPU_CHECK_SELF_TEST_FAKE_NVML=PATH to tests/fake-nvml's library): the GPU
cases run against that fake NVML and a fake CUDA allocator (fake_cuda.py), every result is
written ``fake-pass``/``FAILED`` and the header says no figure came from a GPU. Without that
variable nothing fake is used: FAKE_NVML_SCRIPT and GPU_CHECK_FAKE_* are removed from the
cases' environment, and a watchdog that reports a fake NVML driver fails the figures case.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "workloads.py")
MIB = 1 << 20
BUDGET_S = 280.0          # the whole check stays under 5 minutes
FAKE_TOTAL_MIB = 1024     # the self-test's device, as CUDA sees it
FAKE_NVML_RESERVED_MIB = 64
FAKE_UUID = "GPU-00000000-1111-2222-3333-444444444444"
CUDA_OOM = re.compile(r"cuda out.of.memory", re.I)


def mib(n):
    if n is None:
        return "?"
    if abs(n) >= 10 * 1024 * MIB:
        return "%.1f GiB" % (n / 1024.0 / MIB)
    return "%.0f MiB" % (n / float(MIB))


class Check:
    def __init__(self, args):
        self.args = args
        self.rows = []
        self.started = time.monotonic()
        self.fake_nvml = os.environ.get("GPU_CHECK_SELF_TEST_FAKE_NVML") or None
        self.work = args.work or tempfile.mkdtemp(prefix="gpu-check.")
        os.makedirs(self.work, exist_ok=True)
        self.nvml_ok = False
        self.gpu_section = False   # rows from here on ran on the GPU (or, self-testing, on the fakes)

    # -- rows ------------------------------------------------------------------------------
    def row(self, case, ok, figures, why=""):
        """OK: True (pass), False (FAILED), None (skipped)."""
        if ok is None:
            result = "skipped"
        elif ok:
            result = "fake-pass" if (self.fake_nvml and self.gpu_section) else "pass"
        else:
            result = "FAILED"
        self.rows.append((case, result, figures, why))

    def failed(self):
        return any(r[1] == "FAILED" for r in self.rows)

    def left(self):
        return BUDGET_S - (time.monotonic() - self.started)

    # -- processes -------------------------------------------------------------------------
    def env(self, case_dir=None):
        """The cases' environment: this checkout's client first; nothing fake unless self-testing."""
        env = dict(os.environ)
        for k in list(env):
            if k == "FAKE_NVML_SCRIPT" or k.startswith("GPU_CHECK_FAKE"):
                del env[k]
        py = os.path.join(self.args.repo, "python")
        env["PYTHONPATH"] = py + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.fake_nvml and case_dir is not None:
            env.pop("CUDA_VISIBLE_DEVICES", None)   # the fake device is visible whatever the test hides
            env.update(self.fake_env(case_dir))
        return env

    def fake_env(self, case_dir):
        """Self-test only: the fake NVML's script and a fake nvidia-smi for the case in CASE_DIR.

        The fake NVML cannot follow the fake allocator; it is scripted to look like each case:
        the figures case holds a quarter of the device, the leak fills it in about 5 s."""
        case = os.path.basename(case_dir)
        pidfile = os.path.join(case_dir, "pid")
        script = os.path.join(case_dir, "nvml.script")
        held = FAKE_TOTAL_MIB // 4 if case.startswith("d-") else 0
        growth = 300 if case.startswith("a-") else 0
        with open(script, "w") as f:
            f.write("device Fake_GPU_(gpu-check_self-test) %s %d 0 0 %d\n"
                    % (FAKE_UUID, FAKE_TOTAL_MIB + FAKE_NVML_RESERVED_MIB, FAKE_NVML_RESERVED_MIB))
            f.write("process 0 pidfile:%s %d %d\n" % (pidfile, held, growth))
        smi = os.path.join(case_dir, "fake-nvidia-smi")
        with open(smi, "w") as f:
            f.write("#!/bin/sh\necho '%s, 0, %d, %d'\n" % (FAKE_UUID, held, FAKE_TOTAL_MIB + FAKE_NVML_RESERVED_MIB))
        os.chmod(smi, 0o755)
        return dict(WATCHDOG_NVML_LIB=self.fake_nvml, FAKE_NVML_SCRIPT=script, GPU_CHECK_FAKE_CUDA="1",
                    GPU_CHECK_FAKE_TOTAL_MIB=str(FAKE_TOTAL_MIB), GPU_CHECK_FAKE_UUID=FAKE_UUID,
                    GPU_CHECK_FAKE_PIDFILE=pidfile, GPU_CHECK_FAKE_NVIDIA_SMI=smi)

    def spawn(self, cmd, log, env, cap):
        """Run CMD in its own session, output to LOG, for at most CAP seconds: (status, timed_out)."""
        with open(log, "ab") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=env, start_new_session=True)
            try:
                return p.wait(timeout=cap), False
            except subprocess.TimeoutExpired:
                end_group(p)
                return p.returncode, True
            except BaseException:   # Ctrl-C or SIGTERM: the case is in its own session, end it too
                end_group(p)
                raise

    def workload(self, name, case, extra=(), watch=True, gpu="off", lead="2s", cap=60.0, cpu=False):
        """Run workloads.py CASE (under the watchdog when WATCH); returns a Run."""
        d = os.path.join(self.work, name)
        os.makedirs(d, exist_ok=True)
        out = os.path.join(d, "result.json")
        cmd = [self.args.python, WORKLOADS, case, "--out", out, "--dir", d] + list(extra)
        if cpu:
            cmd.append("--cpu")
        run = Run(d)
        if self.left() < 5:
            run.not_run = "not run: the check's %.0f s budget was spent by the cases before" % BUDGET_S
            return run
        if watch:
            cmd = [self.args.bin, "--gpu", gpu, "--interval", "50ms", "--lead", lead,
                   "--events", run.events_path, "--record", run.recording_path,
                   "--request-file", os.path.join(d, "request.json"),
                   "--no-status", "--no-notify", "run", "--"] + cmd
        run.cap = max(1.0, min(cap, self.left()))
        run.status, run.timed_out = self.spawn(cmd, run.log_path, self.env(None if cpu else d), run.cap)
        run.load(out)
        if run.timed_out and run.result.get("pid"):
            # the workload, should the watchdog have been killed before it could end it
            # (checked by its command line: the PID may be another process's by now)
            pid = int(run.result["pid"])
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    if WORKLOADS.encode() in f.read():
                        os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not self.fake_nvml:
            drivers = [str(g.get("driver")) for g in run.gpus()]
            if any("fake" in d for d in drivers):
                run.not_run = ("the watchdog loaded a FAKE NVML library (driver %s; WATCHDOG_NVML_LIB=%s): "
                               "no figure of this case is real" % (",".join(drivers), os.environ.get("WATCHDOG_NVML_LIB")))
        return run


def end_group(p):
    """SIGTERM to P's process group (the watchdog passes it on), SIGKILL 5 s later."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


class Run:
    """One case's process: its status, its result file, the watchdog's events and recording."""

    def __init__(self, d):
        self.dir = d
        self.log_path = os.path.join(d, "log.txt")
        self.events_path = os.path.join(d, "events.jsonl")
        self.recording_path = os.path.join(d, "recording.csv")
        self.status = None
        self.timed_out = False
        self.result = {}
        self.events = []
        self.not_run = None
        self.cap = None

    def load(self, out):
        try:
            with open(out) as f:
                self.result = json.load(f)
        except (OSError, ValueError):
            self.result = {}
        try:
            with open(self.events_path) as f:
                for line in f:
                    try:
                        self.events.append(json.loads(line))
                    except ValueError:
                        pass
        except OSError:
            pass

    def of(self, kind):
        return [e for e in self.events if e.get("event") == kind]

    def exit(self):
        ex = self.of("exit")
        return ex[-1] if ex else {}

    def gpus(self):
        """The GPUs of the start event's environment (name, memory, driver)."""
        start = self.of("start")
        return (start[0].get("environment", {}).get("gpus") if start else None) or []

    def verdict(self):
        ex = self.exit()
        return ex.get("verdict"), ex.get("summary") or ""

    def log_tail(self):
        """The last meaningful line of the case's log (an exception, usually)."""
        try:
            with open(self.log_path, errors="replace") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
        except OSError:
            return ""
        for ln in reversed(lines):
            if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", ln) or "Error:" in ln:
                return ln[:200]
        return lines[-1][:200] if lines else ""

    def problem(self):
        """Why the case could not be judged at all, or None."""
        if self.not_run:
            return self.not_run
        if self.timed_out:
            where = " at step %s" % self.result["step"] if "step" in self.result else ""
            return "ended by its time cap of %.0f s%s; last output: %s" % (self.cap, where, self.log_tail())
        if self.result.get("missing_api"):
            return "this client lacks %s" % ", ".join(self.result["missing_api"])
        if "error" in self.result:
            return "error: %s" % self.result["error"]
        if "device" not in self.result:   # workloads.py notes the device once torch and the client are in
            return "exit status %s before the case began; %s" % (self.status, self.log_tail())
        return None

    def recording(self):
        """(start_unix, {resource: [(t, used, limit)]}) from the flight recording."""
        start, rows = None, {}
        try:
            with open(self.recording_path) as f:
                for line in f:
                    if line.startswith("#"):
                        m = re.search(r'"start_unix":([0-9.]+)', line)
                        if m and start is None:
                            start = float(m.group(1))
                        continue
                    parts = line.strip().split(",")
                    if len(parts) == 4 and parts[0] != "time":
                        try:
                            rows.setdefault(parts[1], []).append((float(parts[0]), int(parts[2]), int(parts[3])))
                        except ValueError:
                            pass
        except OSError:
            pass
        return start, rows


def request_fields(requests):
    """The misses of the issue-19 requests among REQUESTS (phase, step and predicted_peak are
    promised with step_peak, eval_peak and fragmentation), and a note of the reasons seen."""
    misses = []
    for q in requests:
        if q.get("reason") in ("step_peak", "eval_peak", "fragmentation"):
            lacking = [k for k in ("phase", "step", "predicted_peak") if q.get(k) is None]
            if lacking:
                misses.append("the %s request lacks %s" % (q["reason"], ", ".join(lacking)))
                break
    seen = ["%s@%s" % (q.get("reason"), q.get("seen_at_step")) for q in requests[:8]]
    more = " and %d more" % (len(requests) - 8) if len(requests) > 8 else ""
    return misses, "requests (reason@step seen): %s%s" % (", ".join(seen) or "none", more)


def verdict_ok(run):
    v, summary = run.verdict()
    return v == "gpu_oom" and bool(CUDA_OOM.search(summary)), "verdict %s" % (v or "none")


def judge_last_chance(check, name, run, resume_case, ckpt, cap):
    """The last-chance save's promises: re-raised, saved, acknowledged with the cause, verdict, resumed."""
    why = run.problem()
    if why:
        check.row(name, False, "", why)
        return
    r = run.result
    ack = r.get("ack") or {}
    misses = []
    if not r.get("reraised_oom"):
        misses.append("the OOM was not re-raised (%s)" % r.get("reraised", "no exception"))
    if not ckpt or not os.path.exists(ckpt):
        misses.append("no checkpoint")
    if ack.get("cause") != "cuda_oom":
        misses.append("ack cause %r, not 'cuda_oom'" % ack.get("cause"))
    if ack.get("step") is None:
        misses.append("the ack has no step")
    elif "saved_step" in r and ack.get("step") != r["saved_step"]:
        misses.append("ack step %s, the checkpoint holds step %s" % (ack.get("step"), r["saved_step"]))
    if ckpt and ack.get("path") and os.path.realpath(str(ack["path"])) != os.path.realpath(ckpt):
        misses.append("ack path %s is not the checkpoint %s" % (ack.get("path"), ckpt))
    vok, vtext = verdict_ok(run)
    if not vok:
        misses.append("%s (%s), not gpu_oom with 'CUDA out of memory'" % (vtext, run.verdict()[1][:80]))
    figures = "OOM at step %s; ack step %s; %s" % (r.get("oom_step"), ack.get("step"), vtext)
    before, at_save = r.get("allocated_before_step"), r.get("allocated_at_save")
    if before is not None and at_save is not None:
        # the failing step held step_held more than before it: freed, the save sees `before`
        figures += "; allocated before the step %s, at the save %s" % (mib(before), mib(at_save))
        if at_save > before + (r.get("step_held") or 0) // 2:
            misses.append("the failed step's %s was not freed before the save" % mib(r.get("step_held")))
    if ckpt and os.path.exists(ckpt):
        res = check.workload(os.path.basename(run.dir) + "-resume", resume_case, ["--ckpt", ckpt], watch=False, cap=cap,
                             cpu="cpu" in name)
        rr = res.result
        if res.problem() or res.status != 0:
            misses.append("resume failed: %s" % (res.problem() or res.log_tail()))
        else:
            if "saved_digest" in r and rr.get("loaded_digest") != r.get("saved_digest"):
                misses.append("the loaded weights differ from the saved ones")
            if ack.get("step") is not None and rr.get("loaded_step") != ack.get("step"):
                misses.append("the checkpoint holds step %s, the ack says %s" % (rr.get("loaded_step"), ack.get("step")))
            if rr.get("continued_to") != (rr.get("loaded_step", -2) + 1):
                misses.append("resume reached step %s from %s" % (rr.get("continued_to"), rr.get("loaded_step")))
            if rr.get("loss_finite") is False:
                misses.append("the resumed step's loss is not finite")
            figures += "; resumed %s->%s" % (rr.get("loaded_step"), rr.get("continued_to"))
    check.row(name, not misses, figures, "; ".join(misses))


def acked_path(run):
    """The checkpoint the ack names, when it names one that exists."""
    path = (run.result.get("ack") or {}).get("path")
    return str(path) if path and os.path.exists(str(path)) else None


def case_c_plain(check, name, cpu):
    gpu = "off" if cpu else check.gpu_mode()
    run = check.workload("c-cpu" if cpu else "c-plain", "oom", gpu=gpu, cap=60, cpu=cpu)
    judge_last_chance(check, name, run, "resume", run.result.get("saved_path"), 60)


def case_c_lightning(check, probe):
    name = "c lightning"
    if "lightning" not in probe:
        check.row(name, None, "", "Lightning not installed (%s)" % probe.get("lightning_error", "")[:80])
        return
    run = check.workload("c-lightning", "lightning", gpu=check.gpu_mode(), cap=90)
    ckdir = os.path.join(run.dir, "lightning")
    ckpts = sorted(run.result.get("checkpoints") or [], key=lambda c: os.path.getmtime(os.path.join(ckdir, c)))
    ckpt = acked_path(run) or (os.path.join(ckdir, ckpts[-1]) if ckpts else None)
    judge_last_chance(check, name, run, "lightning-resume", ckpt, 90)


def case_c_transformers(check, probe):
    name = "c transformers"
    if "transformers" not in probe:
        check.row(name, None, "", "Transformers not installed (%s)" % probe.get("transformers_error", "")[:80])
        return
    run = check.workload("c-transformers", "transformers", gpu=check.gpu_mode(), cap=120)
    out = os.path.join(run.dir, "hf")
    ckpts = [c for c in (run.result.get("checkpoints") or []) if c.startswith("checkpoint-")]
    ckpts.sort(key=lambda c: int(c.split("-")[-1]) if c.split("-")[-1].isdigit() else -1)
    ckpt = acked_path(run) or (os.path.join(out, ckpts[-1]) if ckpts else None)
    judge_last_chance(check, name, run, "transformers-resume", ckpt, 120)


def case_a_leak(check):
    name = "a leak"
    run = check.workload("a-leak", "leak", gpu=check.gpu_mode(), lead="2s", cap=90)
    why = run.problem()
    if why:
        check.row(name, False, "", why)
        return
    r = run.result
    oom = r.get("oom_step")
    reqs = [q for q in r.get("requests", []) if q.get("reason") in ("step_peak", "trend")]
    early = [q for q in reqs if oom is None or q["seen_at_step"] < oom]
    saved = [s for s in r.get("saved", []) if (s.get("ack") or {}).get("seq") is not None]
    misses = []
    if oom is None:
        misses.append("no OOM within %ss (leak %s/step)" % (r.get("no_oom_within_s"), mib(r.get("chunk"))))
    if not early:
        others = sorted({str(q.get("reason")) for q in r.get("requests", [])})
        misses.append("no step_peak/trend request before the OOM" + (" (only %s)" % ", ".join(others) if others else ""))
    if not saved:
        misses.append("no acknowledged save")
    elif not run.of("ack"):
        misses.append("the watchdog logged no ack event for the save")
    vok, vtext = verdict_ok(run)
    if not vok:
        misses.append("%s (%s)" % (vtext, run.verdict()[1][:80]))
    fmiss, seen = request_fields(r.get("requests", []))
    misses += fmiss
    first = early[0] if early else {}
    figures = "leak %s/step; warned at step %s (%s%s); saved %s; OOM at step %s; lead %s steps; %s" % (
        mib(r.get("chunk")), first.get("seen_at_step"), first.get("reason"),
        ", predicted %s" % mib(first["predicted_peak"]) if first.get("predicted_peak") else "",
        ",".join(str(s["step"]) for s in saved) or "none", oom,
        (oom - first["seen_at_step"]) if (oom and first) else "?", vtext) + "; " + seen
    check.row(name, not misses, figures, "; ".join(misses))


def case_b_eval(check):
    name = "b eval peak"
    run = check.workload("b-eval", "eval", gpu=check.gpu_mode(), lead="2s", cap=60)
    why = run.problem()
    if why:
        check.row(name, False, "", why)
        return
    r = run.result
    planned = r.get("planned_failing_eval")
    failed_eval = r.get("oom_eval")
    warned = [q for q in r.get("requests", []) if q.get("reason") == "eval_peak"]
    before = [q for q in warned if failed_eval is None or q.get("evals_done", 0) < failed_eval]
    misses = []
    if failed_eval is None:
        misses.append("no evaluation ran out of memory (eval %d of %s/eval unit was planned to)"
                      % (planned or 0, mib(r.get("eval_unit"))))
    elif failed_eval != planned:
        misses.append("evaluation %s failed, %s was planned (the device's free memory moved?)" % (failed_eval, planned))
    if not before:
        others = sorted({str(q.get("reason")) for q in r.get("requests", [])})
        misses.append("no eval_peak request before the failing evaluation" + (" (only %s)" % ", ".join(others) if others else ""))
    if not r.get("saved"):
        misses.append("no save")
    elif not run.of("ack"):
        misses.append("the watchdog logged no ack event for the save")
    fmiss, seen = request_fields(r.get("requests", []))
    misses += fmiss
    first = before[0] if before else {}
    figures = "eval k holds k*%s; eval_peak seen after eval %s (first predicted %s); failed at eval %s; %s" % (
        mib(r.get("eval_unit")), ",".join(str(q.get("evals_done")) for q in warned) or "none",
        mib(first.get("predicted_peak")), failed_eval, run.verdict()[0]) + "; " + seen
    check.row(name, not misses, figures, "; ".join(misses))


def case_d_figures(check, probe):
    """The watchdog's reading comes from its flight recording (every sample of gpuN, timed):
    `watchdog status` answers only for the service, and the events carry no samples."""
    run = check.workload("d-figures", "figures", gpu=check.gpu_mode(), lead="30s", cap=60)
    why = run.problem()
    if why or run.status != 0:
        check.row("d NVML figures", False, "", why or "exit status %s; %s" % (run.status, run.log_tail()))
        check.row("d memory_stats()", False, "", "not measured: the figures case failed")
        return
    r = run.result
    dev = probe.get("device") or {}
    uuid = (dev.get("uuid") or "").lower().replace("gpu-", "")
    misses = []
    # which gpuN is torch's device: the limit event's source names the UUID
    name = None
    for e in run.of("limit"):
        if e.get("kind") == "gpu_memory" and uuid and uuid in str(e.get("source", "")).lower():
            name = e.get("resource")
    gpu_limits = [e.get("resource") for e in run.of("limit") if e.get("kind") == "gpu_memory"]
    if name is None and not uuid and len(gpu_limits) == 1:
        name = gpu_limits[0]   # torch gives no UUID: the one device the watchdog watches
    if name is None:
        misses.append("no gpuN of the watchdog has torch's device UUID %s" % (uuid or "(torch gives none)"))
    start, rec = run.recording()
    samples = rec.get(name or "", [])
    t_torch = (r.get("torch_time") or 0) - (start or 0)
    near = [s for s in samples if s[0] <= t_torch + 0.5] or samples
    figures = ""
    if not samples:
        misses.append("no %s samples in the recording" % (name or "gpu"))
    else:
        t, used, limit = near[-1]
        free, total = r.get("torch_free"), r.get("torch_total")
        smi_used = smi_total = None
        for line in (r.get("smi_out") or "").splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 4 and parts[0].lower().replace("gpu-", "") == uuid:
                try:
                    smi_used, smi_total = int(float(parts[2])) * MIB, int(float(parts[3])) * MIB
                except ValueError:
                    pass
        tol = max(64 * MIB, int(0.005 * (total or 0)))
        headroom = limit - used
        figures = ("NVML(watchdog) used %s limit %s; torch free %s total %s (headroom diff %s); "
                   "nvidia-smi used %s total %s (used diff %s); held %s"
                   % (mib(used), mib(limit), mib(free), mib(total), mib(headroom - free if free is not None else None),
                      mib(smi_used), mib(smi_total), mib(used - smi_used if smi_used is not None else None),
                      mib(r.get("held"))))
        if free is None or abs(headroom - free) > tol:
            misses.append("watchdog headroom (limit-used) and torch's free differ by more than %s" % mib(tol))
        if smi_used is None:
            misses.append("no nvidia-smi figure for %s (%s)" % (uuid, (r.get("smi_err") or r.get("smi_error") or "").strip()[:80]))
        elif abs(used - smi_used) > tol:
            misses.append("watchdog used and nvidia-smi used differ by more than %s" % mib(tol))
        if used < (r.get("held") or 0):
            misses.append("NVML used is below what the process holds")
    check.row("d NVML figures", not misses, figures, "; ".join(misses))
    if r.get("stats_calls"):
        check.row("d memory_stats()", True, "mean %.1f us, p99 %.1f us over %d calls"
                  % (r["stats_mean_us"], r["stats_p99_us"], r["stats_calls"]))
    else:
        check.row("d memory_stats()", False, "", "not measured")


class Driver(Check):
    def gpu_mode(self):
        return "required" if self.nvml_ok else "auto"

    def run(self):
        a = self.args
        # the binary
        try:
            v = subprocess.run([a.bin, "--version"], capture_output=True, text=True, timeout=20)
            bin_ok = v.returncode == 0
            self.row("binary", bin_ok, v.stdout.strip() or v.stderr.strip()[:100], "" if bin_ok else "status %d" % v.returncode)
        except OSError as e:
            bin_ok = False
            self.row("binary", False, a.bin, "%s (set WATCHDOG_BIN, or build: cargo build --release)" % e.strerror)
        # what python, the client and torch are
        pr = self.workload("probe", "probe", watch=False, cap=120)
        p = pr.result
        missing = p.get("client_missing") or []
        if "client_error" in p or not p:
            self.row("client", False, "", p.get("client_error") or pr.log_tail())
        else:
            ack = "acknowledge(path, step, cause)" if p.get("acknowledge_args") else "acknowledge() without path/step/cause"
            self.row("client", not missing and p.get("acknowledge_args"),
                     "%s; %s" % (p.get("client"), ack), ("lacks " + ", ".join(missing)) if missing else "")
        if "torch" not in p:
            self.row("torch", False, "", p.get("torch_error", "not importable"))
            print("torch is not importable (%s): nothing more can be checked." % p.get("torch_error", "?"))
            return
        self.row("torch", p.get("has_oom_error", False),
                 "torch %s, CUDA build %s; Lightning %s; Transformers %s" % (
                     p["torch"], p.get("torch_cuda") or "none (CPU build)", p.get("lightning", "absent"),
                     p.get("transformers", "absent")),
                 "" if p.get("has_oom_error") else "torch has no OutOfMemoryError (torch 1.13 or later needed)")
        if not bin_ok:
            return
        # the last-chance save on the CPU: needs no GPU
        case_c_plain(self, "c-cpu last chance", cpu=True)

        no_gpu = self.why_no_gpu(p)
        if no_gpu:
            print("No GPU here (%s): ran only the checks that need none." % no_gpu)
            return
        if self.fake_nvml:
            print("SELF-TEST against the fake NVML (%s) and a fake CUDA allocator: no figure below comes from a GPU."
                  % self.fake_nvml)
        dev = p.get("device", {})
        print("GPU: %s, %s, %s free of %s; driver %s; PYTORCH_CUDA_ALLOC_CONF=%r" % (
            dev.get("name"), dev.get("uuid"), mib(dev.get("free")), mib(dev.get("mem_total")),
            self.driver_version(), p.get("alloc_conf")))
        self.gpu_section = True
        case_a_leak(self)
        case_b_eval(self)
        case_c_plain(self, "c plain last chance", cpu=False)
        case_c_lightning(self, p)
        case_c_transformers(self, p)
        case_d_figures(self, p)

    def driver_version(self):
        if self.fake_nvml:
            return "(fake)"
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20)
            return ",".join(sorted(set(r.stdout.split()))) or "?"
        except (OSError, subprocess.TimeoutExpired):
            return "?"

    def why_no_gpu(self, probe):
        """None when a GPU can be used; else the reason, in a few words."""
        if self.fake_nvml:
            self.nvml_ok = True
            return None
        reasons = []
        smi = shutil.which("nvidia-smi")
        if not smi:
            reasons.append("no nvidia-smi on PATH")
        if not probe.get("cuda_available"):
            reasons.append("torch %s: torch.cuda.is_available() is False%s" % (
                probe.get("torch"), "" if probe.get("torch_cuda") else " (a CPU build)"))
        if reasons:
            return "; ".join(reasons)
        # the watchdog's own NVML: a GPU machine where it fails is a failure, not "no GPU"
        d = os.path.join(self.work, "nvml")
        os.makedirs(d, exist_ok=True)
        run = Run(d)
        try:
            n = subprocess.run([self.args.bin, "--gpu", "required", "--no-status", "--no-notify",
                                "--events", run.events_path, "run", "--", "true"],
                               capture_output=True, text=True, timeout=30, env=self.env())
            self.nvml_ok = n.returncode == 0
            err = n.stderr.strip().splitlines()[-1] if n.stderr.strip() else "status %d" % n.returncode
        except (OSError, subprocess.TimeoutExpired) as e:
            err = str(e)
        run.load(os.path.join(d, "none.json"))
        gpus = "; ".join("gpu%s %s %s driver %s CUDA %s" % (g.get("index"), g.get("model"), mib(g.get("memory_bytes")),
                                                             g.get("driver"), g.get("cuda_driver"))
                         for g in run.gpus())
        fake = any("fake" in str(g.get("driver")) for g in run.gpus())
        if fake:
            self.nvml_ok = False
            err = "a FAKE NVML library was loaded (WATCHDOG_NVML_LIB=%s)" % os.environ.get("WATCHDOG_NVML_LIB")
        self.row("nvml", self.nvml_ok, gpus if self.nvml_ok or fake else "", "" if self.nvml_ok else err)
        return None

    def table(self):
        heads = ("case", "result", "figures", "why")
        widths = [max(len(h), *(len(r[i]) for r in self.rows)) if self.rows else len(h) for i, h in enumerate(heads[:2])]
        print("%-*s  %-*s  %s" % (widths[0], heads[0], widths[1], heads[1], "figures | why it failed"))
        for case, result, figures, why in self.rows:
            text = figures + (" | " + why if why else "")
            print("%-*s  %-*s  %s" % (widths[0], case, widths[1], result, text))
        fake = sum(r[1] == "fake-pass" for r in self.rows)
        print("%d case(s): %d pass%s, %d FAILED, %d skipped, in %.0f s." % (
            len(self.rows), sum(r[1] == "pass" for r in self.rows), ", %d fake-pass" % fake if fake else "",
            sum(r[1] == "FAILED" for r in self.rows), sum(r[1] == "skipped" for r in self.rows),
            time.monotonic() - self.started))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--work", help="where the cases write (default: a new temp dir, removed unless a case failed)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir even when every case passed")
    args = ap.parse_args()
    d = Driver(args)

    def stop(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        d.run()
    except KeyboardInterrupt:
        d.row("check", False, "", "interrupted: the cases after the last row did not run")
    except Exception as e:  # noqa: BLE001 - a bug of the check itself is a row too, with its place
        import traceback

        where = traceback.extract_tb(e.__traceback__)[-1]
        d.row("check", False, "", "check.py failed: %s: %s (%s:%d)"
              % (type(e).__name__, e, os.path.basename(where.filename), where.lineno))
    finally:
        d.table()
        if d.failed() or args.keep or os.environ.get("GPU_CHECK_KEEP") == "1":
            print("Logs, events and recordings of each case: %s" % d.work)
        elif not args.work:
            shutil.rmtree(d.work, ignore_errors=True)
    return 1 if d.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
