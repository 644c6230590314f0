"""The watchdog in real SLURM jobs: the end from the controller, the save before it, the
requeue after it, the resume, the verdict, the scheduler's signals and the service.

One cluster (tests/slurm/cluster.py) for the module. Every job is submitted in
``setUpModule`` so they all run at once (SLURM's smallest time limit is a minute, and its
limit check fires up to 30 s after the end); each test then waits for its own. A requeued
job is held by SLURM for about two minutes; the tests lift the hold (``release``) as soon
as the job is pending again.
"""

import datetime
import json
import os
import re
import socket
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as slurm  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests"))
import need  # noqa: E402

CLUSTER = None
JOBS = {}
DIRS = {}
LEAD = 20  # seconds: --lead of the time-limit jobs

# `exec`: SLURM sends SIGTERM only to the batch script's own process (docs/slurm.md).
PLAIN = """#!/bin/sh
exec watchdog --lead %ds --no-notify --events ev.jsonl %s run -- python3 "%s/train.py"
"""


def script(flags="", lead=LEAD):
    return PLAIN % (lead, flags, os.path.join(CLUSTER.path("jobs")))


def submit(name, text, *args, env=None):
    DIRS[name] = CLUSTER.workdir(name)
    JOBS[name] = CLUSTER.sbatch(text, *args, workdir=DIRS[name], env=env)


def setUpModule():
    global CLUSTER
    CLUSTER = slurm.Cluster().start()
    unittest.addModuleCleanup(CLUSTER.stop)
    CLUSTER.watchdog_bin()
    jobs = CLUSTER.path("jobs")
    os.makedirs(jobs, exist_ok=True)
    for name in ("train.py", "lit.py"):
        with open(os.path.join(HERE, "jobs", name)) as src, open(os.path.join(jobs, name), "w") as dst:
            dst.write(src.read())
    os.chmod(jobs, 0o755)
    # (a) the end from the controller, the save before it, the verdict.
    submit("end", script(), "--time=1")
    # (b) requeued once after the save, resumed, finished in the second allocation.
    submit("requeue", script("--requeue"), "--time=1", env={"STEPS": "600"})
    # (c) the end moved by an administrator.
    submit("moved", script("--slurm-poll 30s"), "--time=5")
    # (d) a leak in the job's memory cgroup, restarted inside the allocation.
    submit("oom", script("--restart 1", lead=3), "--time=3", "--mem=300M",
           env={"LEAK_MIB": "2", "STEP_S": "0.05", "STEPS": "400"})
    # (e) stuck at one step: requeued once, never again.
    submit("stuck", script("--requeue"), "--time=1", env={"STUCK_AT": "30"})
    # (f) two tasks, each under its own watchdog: both save, the job is requeued once.
    submit("ranks", """#!/bin/sh
exec srun --ntasks=2 sh -c 'exec watchdog --lead %ds --no-notify --requeue --events ev-$SLURM_PROCID.jsonl --checkpoint-record rec-$SLURM_PROCID.json run -- env CKPT_TAG=rank$SLURM_PROCID- python3 "%s/train.py"'
""" % (LEAD, jobs), "--time=1", "--ntasks=2", env={"STEPS": "600"})
    # (i) scancel --full: SIGTERM to every process of the job, the run's client saves.
    submit("term", script("--term-grace 8s"), "--time=5",
           env={"ON_TERM": "save", "RESUME_FROM_RECORD": "1", "WATCHDOG_RUN_KEY": "bert"})
    # (h) the service on the node.
    submit("service", "#!/bin/sh\nexec sleep 300\n", "--time=5")
    # (c) an administrator shortens the job once its watchdog has read the first end.
    CLUSTER.wait_until(lambda: of_kind(events("moved"), "limit", "runtime"), 60, "the first end read")
    CLUSTER.run("scontrol", "update", "JobId=%d" % JOBS["moved"], "TimeLimit=1")


def tearDownModule():
    CLUSTER.stop()


def events(name, file="ev.jsonl"):
    path = os.path.join(DIRS[name], file)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def of_kind(evs, kind, resource=None):
    return [e for e in evs if e["event"] == kind and (resource is None or e.get("resource") == resource)]


def unix(rfc3339):
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def end_of(limit_event):
    m = re.search(r"EndTime=(\S+)", limit_event["source"])
    assert m, limit_event
    return unix(m.group(1))


def state(j):
    return None if j is None else j["JobState"]


def wait_gone_or(name, states, timeout):
    return CLUSTER.wait_for(JOBS[name], lambda j: j is not None and state(j) in states, timeout)


def requeue_and_release(name, timeout=150):
    """Waits until the job was requeued and, while SLURM holds it, starts it at once (the
    other tests may have taken longer than the hold)."""
    j = CLUSTER.wait_for(JOBS[name], lambda j: j is not None and j["Restarts"] != "0"
                         and state(j) != "COMPLETING", timeout)
    if state(j) == "PENDING":
        CLUSTER.release(JOBS[name])
    return j


class SlurmEnd(unittest.TestCase):
    def test_a_the_request_comes_a_lead_before_the_controllers_end_and_the_verdict_is_runtime_limit(self):
        j = wait_gone_or("end", ("TIMEOUT",), 150)
        self.assertEqual(j["Reason"], "TimeLimit")
        evs = CLUSTER.wait_until(lambda: of_kind(events("end"), "exit") and events("end"), 20)
        limits = of_kind(evs, "limit", "runtime")
        self.assertTrue(limits, evs)
        self.assertTrue(limits[0]["source"].startswith("slurm controller: EndTime="), limits[0])
        end = end_of(limits[-1])
        alerts = of_kind(evs, "alert", "runtime")
        self.assertEqual(len(alerts), 1, alerts)
        self.assertLessEqual(unix(alerts[0]["time"]), end - LEAD + 0.25, (alerts[0], end))
        acks = of_kind(evs, "ack")
        self.assertTrue(acks and acks[0].get("step"), evs)
        # The time limit's SIGTERM is a notice too: the run may save once more before it.
        self.assertLessEqual(len(acks), 2, acks)
        exit_ = of_kind(evs, "exit")[-1]
        self.assertEqual(exit_["verdict"], "runtime_limit", exit_)
        self.assertTrue(any("TimeLimit" in e for e in exit_["evidence"]), exit_)
        with open(os.path.join(DIRS["end"], ".watchdog-checkpoints.json")) as f:
            record = json.load(f)
        entry = record["entries"][-1]
        self.assertEqual((entry["key"], entry["step"], entry["verdict"]),
                         ("slurm-%d" % JOBS["end"], acks[-1]["step"], "runtime_limit"))

    def test_c_an_end_moved_by_the_controller_moves_the_request(self):
        j = wait_gone_or("moved", ("TIMEOUT",), 180)
        evs = CLUSTER.wait_until(lambda: of_kind(events("moved"), "exit") and events("moved"), 20)
        limits = of_kind(evs, "limit", "runtime")
        self.assertGreaterEqual(len(limits), 2, limits)
        first, moved = end_of(limits[0]), end_of(limits[-1])
        self.assertLess(moved, first - 200, limits)
        alerts = of_kind(evs, "alert", "runtime")
        self.assertEqual(len(alerts), 1, alerts)
        self.assertLessEqual(unix(alerts[0]["time"]), moved - LEAD + 0.25, (alerts, moved))
        self.assertGreater(unix(alerts[0]["time"]), unix(limits[-1]["time"]) - 0.01)
        self.assertEqual(of_kind(evs, "exit")[-1]["verdict"], "runtime_limit")
        self.assertEqual(j["Reason"], "TimeLimit")


class Requeue(unittest.TestCase):
    def test_b_requeued_once_after_the_save_and_resumed_at_the_next_step(self):
        requeue_and_release("requeue")
        j = wait_gone_or("requeue", ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"), 180)
        log = CLUSTER.log_of(JOBS["requeue"])
        self.assertEqual(state(j), "COMPLETED", log)
        self.assertEqual(j["Restarts"], "1", log)
        evs = events("requeue")
        requeues = of_kind(evs, "requeue")
        self.assertEqual(len(requeues), 1, requeues)
        acked = requeues[0]["step"]
        self.assertTrue(acked, requeues)
        self.assertEqual(requeues[0]["job_id"], JOBS["requeue"])
        self.assertEqual(requeues[0]["restart_count"], 0)
        # The requeue's SIGTERM is a notice too: the run may save once more, later.
        resumed = int(re.search(r"was requeued \(restart 1\): resuming from .* \(step (\d+)\)", log).group(1))
        self.assertGreaterEqual(resumed, acked)
        self.assertIn("start at step %d (restart=1, last verdict=runtime_limit" % (resumed + 1), log)
        self.assertIn("finished at step 600", log)
        self.assertIn("was requeued (restart 1): resuming from", log)

    def test_e_a_job_that_makes_no_progress_is_not_requeued_again(self):
        requeue_and_release("stuck")
        j = wait_gone_or("stuck", ("TIMEOUT", "COMPLETED", "FAILED", "CANCELLED"), 200)
        log = CLUSTER.log_of(JOBS["stuck"])
        self.assertEqual(state(j), "TIMEOUT", log)
        self.assertEqual(j["Restarts"], "1", log)
        self.assertIn("not requeued: no progress since requeue 1", log)
        self.assertEqual(len(of_kind(events("stuck"), "requeue")), 1)

    def test_f_two_tasks_both_save_and_the_job_is_requeued_once(self):
        requeue_and_release("ranks")
        j = wait_gone_or("ranks", ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"), 180)
        log = CLUSTER.log_of(JOBS["ranks"])
        self.assertEqual((state(j), j["Restarts"]), ("COMPLETED", "1"), log)
        rank0, rank1 = events("ranks", "ev-0.jsonl"), events("ranks", "ev-1.jsonl")
        self.assertEqual(len(of_kind(rank0, "requeue")), 1, rank0)
        self.assertEqual(of_kind(rank1, "requeue"), [], "only rank 0 requeues")
        for evs in (rank0, rank1):
            self.assertTrue(of_kind(evs, "ack"), evs)
        for rank in (0, 1):
            self.assertIn("train[%d]: finished at step 600" % rank, log)
            self.assertRegex(log, r"train\[%d\]: start at step [1-9][0-9]+ \(restart=1" % rank)


class InsideTheAllocation(unittest.TestCase):
    def test_d_an_oom_kill_in_the_jobs_cgroup_is_saved_restarted_and_resumed(self):
        j = wait_gone_or("oom", ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY"), 200)
        log = CLUSTER.log_of(JOBS["oom"])
        evs = events("oom")
        exits = of_kind(evs, "exit")
        self.assertEqual([e.get("verdict") for e in exits], ["oom_kill", "exited"], log)
        self.assertEqual(exits[-1]["code"], 0, log)
        alerts = of_kind(evs, "alert", "cgroup_memory")
        self.assertTrue(alerts, log)
        restart = of_kind(evs, "restart")[0]
        self.assertTrue(restart["resume_from"], restart)
        self.assertIn("start at step %d (restart=1" % (restart["step"] + 1), log)
        self.assertIn("finished at step 400", log)
        self.assertEqual(j["Restarts"], "0")


def frameworks_python(test):
    """The interpreter the frameworks were installed into (this one), where the test user can
    run it: CI installs them with root's pip, often under a 0700 home. Its prefix is bound
    read-only at a directory of its own (outside the cluster's, which is removed), and
    unbound when the test ends. Returns (python, LD_LIBRARY_PATH)."""
    import tempfile
    where = tempfile.mkdtemp(prefix="watchdog-slurm-python-")
    os.chmod(where, 0o755)
    subprocess.run(["mount", "--bind", sys.prefix, where], check=True)
    test.addCleanup(os.rmdir, where)
    test.addCleanup(subprocess.run, ["umount", where], check=True)
    subprocess.run(["mount", "-o", "remount,ro,bind", where], check=True)
    return os.path.join(where, "bin", "python3"), os.path.join(where, "lib")


class Lightning(unittest.TestCase):
    def test_g_lightning_auto_requeue_on_the_schedulers_signal_requeues_exactly_once(self):
        need.require_modules("torch", "lightning")
        python, libs = frameworks_python(self)
        workdir = CLUSTER.workdir("lit")
        job = CLUSTER.sbatch("""#!/bin/sh
exec watchdog --lead %ds --no-notify --requeue --events ev.jsonl run -- "%s" "%s/lit.py"
""" % (LEAD, python, CLUSTER.path("jobs")), "--time=5", "--ntasks=1", "--mem=3G", "--job-name=lit", workdir=workdir,
            env={"MAX_STEPS": "400", "LD_LIBRARY_PATH": libs})
        CLUSTER.wait_until(lambda: "lit: step 40" in CLUSTER.log_of(job), 240)
        CLUSTER.run("scancel", "--signal=USR1", "--batch", str(job))
        j = CLUSTER.wait_for(job, lambda j: j is not None and j["Restarts"] == "1" and state(j) != "COMPLETING", 120)
        if state(j) == "PENDING":
            CLUSTER.release(job)
        j = CLUSTER.wait_for(job, lambda j: j is not None and state(j) in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"), 400)
        log = CLUSTER.log_of(job)
        self.assertEqual((state(j), j["Restarts"]), ("COMPLETED", "1"), log)
        self.assertIn("forwarded SIGUSR1", log)
        self.assertIn("lit: finished at step 400", log)
        self.assertEqual(of_kind(events_in(workdir), "requeue"), [], "the watchdog did not requeue a second time")


def events_in(workdir):
    path = os.path.join(workdir, "ev.jsonl")
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Cancelled(unittest.TestCase):
    def test_i_scancel_full_reaches_every_process_the_run_saves_and_a_rerun_resumes(self):
        CLUSTER.wait_until(lambda: "train[0]: step 50" in CLUSTER.log_of(JOBS["term"]), 120, "50 steps")
        CLUSTER.run("scancel", "--full", "--signal=TERM", str(JOBS["term"]))
        evs = CLUSTER.wait_until(lambda: of_kind(events("term"), "exit") and events("term"), 60, "the exit")
        log = CLUSTER.log_of(JOBS["term"])
        acks = of_kind(evs, "ack")
        self.assertTrue(acks, log)
        saved = acks[-1]["step"]
        self.assertEqual(of_kind(evs, "exit")[-1]["signal"], 15, log)
        # A rerun by hand in the same directory, under the same run key, resumes.
        again = CLUSTER.sbatch(script(), "--time=1", workdir=DIRS["term"],
                               env={"STEPS": str(saved + 20), "RESUME_FROM_RECORD": "1",
                                    "WATCHDOG_RUN_KEY": "bert"})
        CLUSTER.wait_for(again, lambda j: j is not None and state(j) in ("COMPLETED", "FAILED", "TIMEOUT"), 120)
        rerun = CLUSTER.log_of(again)
        self.assertIn("start at step %d" % (saved + 1), rerun)
        self.assertIn("finished at step %d" % (saved + 20), rerun)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service(unittest.TestCase):
    def test_h_the_service_finds_a_job_by_its_cgroup_and_names_it(self):
        CLUSTER.wait_for(JOBS["service"], lambda j: j is not None and state(j) == "RUNNING", 60)
        d = CLUSTER.path("service")
        os.makedirs(d, exist_ok=True)
        sock, port = os.path.join(d, "daemon.sock"), free_port()
        config = os.path.join(d, "daemon.toml")
        with open(config, "w") as f:
            f.write('socket = "%s"\nrequest_dir = "%s/users"\nstate_dir = "%s/state"\n'
                    'metrics = "127.0.0.1:%d"\n\n[[rule]]\nname = "slurm-jobs"\n[rule.match]\nslurm = true\n'
                    % (sock, d, d, port))
        log = open(os.path.join(d, "daemon.log"), "w")
        self.addCleanup(log.close)
        daemon = subprocess.Popen([CLUSTER.watchdog_bin(), "daemon", "--config", config],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            def found():
                out = subprocess.run([CLUSTER.watchdog_bin(), "status", "--socket", sock, "--json"],
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    return None
                targets = json.loads(out.stdout).get("targets", [])
                return [t for t in targets if t.get("slurm_job_id") == JOBS["service"]] or None
            targets = CLUSTER.wait_until(found, 30)

            # The service never waits for the controller: the end comes with its first answer.
            def limited():
                t = found()
                runtime = [r for r in (t[0]["resources"] if t else []) if r["name"] == "runtime"]
                return t if runtime and runtime[0].get("limit") else None
            targets = CLUSTER.wait_until(limited, 30, "the job's end in the service's status")
            self.assertEqual(targets[0]["slurm_step"], "batch", targets)
            text = subprocess.run([CLUSTER.watchdog_bin(), "status", "--socket", sock],
                                  capture_output=True, text=True).stdout
            self.assertIn("slurm job %d step batch" % JOBS["service"], text)
            metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
            self.assertIn('slurm_job_id="%d"' % JOBS["service"], metrics)
            runtime = [t for t in targets[0]["resources"] if t["name"] == "runtime"]
            self.assertTrue(runtime and runtime[0].get("limit"), targets[0]["resources"])
        finally:
            daemon.terminate()
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()
            CLUSTER.run("scancel", str(JOBS["service"]), check=False)


if __name__ == "__main__":
    unittest.main()
