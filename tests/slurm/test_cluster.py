"""The test cluster itself, on the real daemons: what the watchdog's SLURM tests rely on.

One cluster for the module (``setUpModule``); every job is submitted in ``setUpModule`` so
they run at once, and each test waits for its own. The longest is the time limit: SLURM's
smallest is one minute and the controller's limit check fires between 1:00 and 1:30, so the
module takes about a minute and a half.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as slurm  # noqa: E402

CLUSTER = None
JOBS = {}

# Prints who it runs as and what SLURM told it, then waits to be ended.
WHO = """#!/bin/sh
echo "user=$(id -un) job=$SLURM_JOB_ID restart=${SLURM_RESTART_COUNT-unset}"
exec sleep 300
"""

DONE = """#!/bin/sh
echo "user=$(id -un) job=$SLURM_JOB_ID"
"""

# The copies of the binary and the client, as the test user.
TOOLS = """#!/bin/sh
echo "binary=$(command -v watchdog) $(watchdog --version)"
python3 -c 'import training_watchdog; print("client=" + training_watchdog.__file__)'
"""

CGROUP = """#!/bin/sh
cat /proc/self/cgroup
echo ready
exec sleep 300
"""


def setUpModule():
    global CLUSTER
    CLUSTER = slurm.Cluster().start()
    unittest.addModuleCleanup(CLUSTER.stop)  # also when a submission below fails
    JOBS["done"] = CLUSTER.sbatch(DONE, "--time=1")
    JOBS["timeout"] = CLUSTER.sbatch(WHO, "--time=1")
    JOBS["mem"] = CLUSTER.sbatch(CGROUP, "--time=5", "--mem=400M")
    try:
        CLUSTER.watchdog_bin()  # fails under CI when there is no binary
        JOBS["tools"] = CLUSTER.sbatch(TOOLS, "--time=1")
    except unittest.SkipTest:
        pass  # only that test is skipped, saying why


def tearDownModule():
    CLUSTER.stop()
    left = CLUSTER.leftovers()
    assert not left, "left after stop(): %s" % left


def state(name):
    return lambda job: job is not None and job["JobState"] == name


class ClusterTest(unittest.TestCase):
    def test_a_job_runs_as_the_test_user_and_sees_its_job_id(self):
        job = JOBS["done"]
        CLUSTER.wait_for(job, state("COMPLETED"), 60)
        self.assertIn("user=%s job=%d" % (slurm.USER, job), CLUSTER.log_of(job))

    def test_the_user_runs_the_copied_binary_and_imports_the_copied_client(self):
        CLUSTER.watchdog_bin()
        job = JOBS["tools"]
        CLUSTER.wait_for(job, state("COMPLETED"), 60)
        log = CLUSTER.log_of(job)
        self.assertIn("binary=%s watchdog " % CLUSTER.path("bin", "watchdog"), log)
        self.assertIn("client=%s" % CLUSTER.path("python", "training_watchdog", "__init__.py"), log)

    def test_a_one_minute_job_is_ended_by_its_time_limit(self):
        job = JOBS["timeout"]
        fields = CLUSTER.wait_for(job, state("TIMEOUT"), 150)
        self.assertEqual(fields["TimeLimit"], "00:01:00")
        self.assertEqual(fields["Reason"], "TimeLimit")
        self.assertIn("DUE TO TIME LIMIT", CLUSTER.log_of(job))

    def test_mem_puts_the_batch_step_in_a_memory_cgroup_with_that_limit(self):
        job = JOBS["mem"]
        CLUSTER.wait_for(job, lambda j: "ready" in CLUSTER.log_of(job), 60)
        path, limit = CLUSTER.memory_limit(CLUSTER.log_of(job))
        self.assertIn("/job_%d/step_batch" % job, path)
        self.assertEqual(limit, 400 * 2**20)
        CLUSTER.run("scancel", str(job))


if __name__ == "__main__":
    unittest.main()
