"""A real one-node SLURM cluster for the tests: munged, slurmctld and slurmd, started by hand.

Debian's ``slurm-wlm`` (22.05) and ``munge`` packages give the daemons; this module gives
them a private configuration and runs them without systemd, so a test submits real jobs
with ``sbatch`` and watches the controller move them through their states::

    cluster = Cluster()
    cluster.start()            # munged, slurmctld, slurmd; waits until the node is idle
    job = cluster.sbatch("#!/bin/sh\\necho $SLURM_JOB_ID\\n", "--time=1")
    cluster.wait_for(job, lambda j: j["JobState"] == "COMPLETED", timeout=60)
    cluster.stop()             # cancels the jobs, stops the daemons, removes the cgroups

Everything lives in one temporary directory (0755, so the test user can read the
configuration and the copies of the binary and the client): ``etc/`` (slurm.conf,
cgroup.conf), ``munge/`` (a private key and socket: the system's munged is left alone),
``state/``, ``spool/``, ``log/`` (each daemon's log), ``bin/`` and ``python/`` (copies of
the watchdog binary and of the client), ``work/`` (a 2 GiB tmpfs: one directory per
test, owned by the test user, and the user's HOME).

The node: ``SlurmdParameters=config_overrides`` with 16 CPUs and 8 GiB, whatever the
machine has, so every test job (1 CPU, 256 MiB unless it asks) runs at once;
``proctrack/cgroup`` and ``task/cgroup`` with ``ConstrainRAMSpace=yes`` on the machine's
cgroup version (``cgroup/v1`` when the v1 memory controller is mounted, else ``cgroup/v2``
with ``IgnoreSystemd=yes``); ``KillWait=10``, ``JobRequeue=1``. Jobs are submitted as the
unprivileged user ``wdslurm`` (created when missing) with ``--open-mode=append``.

Needs root and the two packages. When something is missing, ``require`` of
python/tests/need.py decides: the test fails when CI is set, and is skipped otherwise.
"""

import getpass
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python", "tests"))
import need  # noqa: E402  (the CI rule of every test: fail when CI is set, else skip)

USER = "wdslurm"
CGROUP_ROOT = "/sys/fs/cgroup"
# The programs the cluster runs (Debian's slurm-wlm and munge; the daemons in /usr/sbin).
SBIN = ":/usr/sbin:/sbin"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun")

SLURM_CONF = """\
# The test cluster of tests/slurm/cluster.py: one node, daemons started by hand.
ClusterName=watchdogtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/run/slurmctld.pid
SlurmdPidFile={dir}/run/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={dir}/etc/plugstack.conf
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
# SIGTERM at the time limit, SIGKILL this many seconds later.
KillWait=10
JobRequeue=1
# Finished jobs leave `squeue` and `scontrol show job` this many seconds after they end.
MinJobAge={min_job_age}
ReturnToService=2
InactiveLimit=0
SlurmdParameters=config_overrides
# The node's name is the cluster's own (slurmd -N), so its cgroups (v1: slurm_<node>) are too.
NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mib} State=UNKNOWN
PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP DefMemPerCPU={def_mem_mib}
"""

CGROUP_CONF_V1 = """\
CgroupPlugin=cgroup/v1
ConstrainRAMSpace=yes
"""

CGROUP_CONF_V2 = """\
CgroupPlugin=cgroup/v2
IgnoreSystemd=yes
ConstrainRAMSpace=yes
"""


def cgroup_version(root=CGROUP_ROOT):
    """1 when the v1 memory controller is mounted under ROOT, else 2."""
    return 1 if os.path.exists(os.path.join(root, "memory", "memory.limit_in_bytes")) else 2


def free_port():
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_job_line(line):
    """The fields of one ``scontrol show job -o`` line as a dict.

    Fields are ``Key=Value`` separated by spaces, every key capitalised (``TRES=cpu=1,mem=256M``
    keeps its value's ``=``). A value may hold spaces (``Comment=``, paths), so a word that
    does not start a field belongs to the value before it.
    """
    fields, key = {}, None
    for word in line.strip().split(" "):
        name, eq, value = word.partition("=")
        if eq and name[:1].isupper():
            key = name
            fields[key] = value
        elif key is not None:
            fields[key] += " " + word
    return fields


class Cluster:
    """One private SLURM cluster (munged, slurmctld, slurmd) for the length of a test module."""

    def __init__(self, cpus=16, memory_mib=8192, def_mem_mib=256, min_job_age=300):
        """A cluster not started yet. MIN_JOB_AGE: seconds a finished job stays visible.

        300 (SLURM's default) keeps a module's finished jobs and their final state in
        ``job()``; a test of a job that is gone passes a smaller one (SLURM purges finished
        jobs in a periodic pass, so "gone" comes up to a minute or so after it).
        """
        self.cpus = cpus
        self.memory_mib = memory_mib
        self.def_mem_mib = def_mem_mib
        self.min_job_age = min_job_age
        self.host = socket.gethostname().split(".")[0]
        self.node = None
        self.dir = None
        self.env = None
        self._procs = {}
        self.pids = {}
        self._count = 0
        self._workdirs = {}
        self._saved_conf = None

    # -- start and stop -------------------------------------------------------------

    def start(self):
        """Check the machine, write the configuration, start the daemons, wait for the node."""
        self._check_machine()
        self.dir = tempfile.mkdtemp(prefix="watchdog-slurm-")
        os.chmod(self.dir, 0o755)
        # "wd" and the directory's random suffix: unique among the clusters on this machine.
        suffix = os.path.basename(self.dir)[len("watchdog-slurm-"):].lower()
        self.node = "wd" + "".join(ch for ch in suffix if ch.isalnum())
        try:
            self._make_layout()
            self._ensure_user()
            self._write_config()
            self._start_munged()
            self._start_slurm()
            self._wait_idle(60)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Cancel the jobs, stop the daemons, remove slurm's cgroups and the directory."""
        if self.dir is None:
            return
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            self._cancel_all()
        for name in ("slurmd", "slurmctld", "munged"):
            self._terminate(name)
        self._kill_job_processes()
        self._remove_cgroups()
        if self._saved_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = self._saved_conf
        if os.environ.get("WATCHDOG_KEEP_SLURM"):
            print("cluster: kept %s" % self.dir, file=sys.stderr)
        else:
            if os.path.ismount(self.path("work")):
                subprocess.run(["umount", "--lazy", self.path("work")], capture_output=True)
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _check_machine(self):
        """Root, the daemons and the clients on PATH; else fail under CI, skip otherwise."""
        need.require(os.geteuid() == 0, "root (slurmd runs jobs as another user in cgroups)")
        path = os.environ.get("PATH", "") + SBIN
        missing = [b for b in DAEMONS + CLIENTS + ("runuser", "useradd")
                   if shutil.which(b, path=path) is None]
        need.require(not missing, "%s (Debian: apt-get install slurm-wlm munge)" % ", ".join(missing))

    def _make_layout(self):
        for sub, mode in (("etc", 0o755), ("munge", 0o755), ("state", 0o700), ("spool", 0o755),
                          ("log", 0o755), ("run", 0o755), ("bin", 0o755), ("work", 0o755)):
            os.mkdir(self.path(sub), mode)
            os.chmod(self.path(sub), mode)
        # The jobs' directories and HOME on a tmpfs of the cluster's own: what the jobs'
        # watchdogs see of their disk (and where they keep recordings) is the test's, not
        # the machine's root filesystem (a CI machine had 2.3 GB of it left, under the
        # default 5% floor for an unprivileged user: every job was asked to save at start).
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g,mode=0755", "tmpfs", self.path("work")],
                       check=True, capture_output=True)

    def _ensure_user(self):
        """The unprivileged user jobs run as, created when missing, with a home of its own as
        a cluster's users have (SLURM sets HOME from the password database: the watchdog keeps
        its recordings under it)."""
        try:
            pwd.getpwnam(USER)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", USER],
                           check=True, capture_output=True)
        entry = pwd.getpwnam(USER)
        self.uid, self.gid = entry.pw_uid, entry.pw_gid
        if not os.path.isdir(entry.pw_dir):
            os.makedirs(entry.pw_dir, 0o755)
            os.chown(entry.pw_dir, self.uid, self.gid)

    def _write_config(self):
        self.conf = self.path("etc", "slurm.conf")
        version = cgroup_version()
        values = dict(host=self.host, node=self.node, dir=self.dir, ctld_port=free_port(),
                      slurmd_port=free_port(), munge_socket=self.path("munge", "munge.socket"),
                      cpus=self.cpus,
                      memory_mib=self.memory_mib, def_mem_mib=self.def_mem_mib,
                      min_job_age=self.min_job_age)
        self._write(self.conf, SLURM_CONF.format(**values))
        self._write(self.path("etc", "cgroup.conf"), CGROUP_CONF_V1 if version == 1 else CGROUP_CONF_V2)
        self._write(self.path("etc", "plugstack.conf"), "")
        self.cgroup_version = version
        self._saved_conf = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = self.conf
        self.env = dict(os.environ, SLURM_CONF=self.conf)

    @staticmethod
    def _write(path, text, mode=0o644):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)

    def _start_munged(self):
        """A private munged (own key, socket, log) so the system's one is left alone."""
        key = self.path("munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self._spawn("munged", ["munged", "--foreground", "--force",
                               "--key-file", key,
                               "--socket", self.path("munge", "munge.socket"),
                               "--pid-file", self.path("run", "munged.pid"),
                               "--seed-file", self.path("munge", "munged.seed"),
                               "--log-file", self.path("log", "munged.log")])
        self._wait(lambda: os.path.exists(self.path("munge", "munge.socket")), 10, "munged's socket")

    def _start_slurm(self):
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        self._wait(self._controller_answers, 30, "slurmctld to answer")
        self._spawn("slurmd", ["slurmd", "-D", "-f", self.conf, "-N", self.node])

    def _spawn(self, name, argv):
        log = open(self.path("log", name + ".out"), "wb")
        env = dict(self.env, PATH=os.environ.get("PATH", "") + SBIN)
        self._procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.pids[name] = self._procs[name].pid
        log.close()

    def _controller_answers(self):
        return self.run("scontrol", "ping", check=False).returncode == 0

    def _wait_idle(self, timeout):
        def idle():
            out = self.run("sinfo", "-h", "-N", "-o", "%t", check=False).stdout.strip()
            return out == "idle"
        self._wait(idle, timeout, "the node to be idle in sinfo")

    def _wait(self, predicate, timeout, what):
        """Poll PREDICATE until true; raise (with the daemons' logs' tails) after TIMEOUT s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError("%s exited with %s while waiting for %s\n%s"
                                       % (name, proc.returncode, what, self.logs()))
            if predicate():
                return
            time.sleep(0.2)
        raise RuntimeError("timed out after %ss waiting for %s\n%s" % (timeout, what, self.logs()))

    def _cancel_all(self):
        """Cancel every job, then wait (up to KillWait and a bit) for the node to empty."""
        self.run("scancel", "--full", "--user", USER, check=False)
        self.run("scancel", "--full", "--user", "root", check=False)
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            out = self.run("squeue", "-h", "-o", "%i %T", check=False).stdout.split("\n")
            if not [line for line in out if line.strip()]:
                return
            time.sleep(0.5)

    def _terminate(self, name, grace=10):
        proc = self._procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _slurm_cgroup_dirs(self):
        """Slurm's top cgroup directories on this machine (v1: one per controller)."""
        if cgroup_version() == 2:
            # A slurmd built for several per host (Debian's is: v1 says slurm_<node>) names its
            # scope after the node; the plain name is a single slurmd's. Not tried here (v1).
            for name in (self.node + "_slurmstepd.scope", "slurmstepd.scope"):
                base = os.path.join(CGROUP_ROOT, "system.slice", name)
                if os.path.isdir(base):
                    return [base]
            return []
        found = []
        for controller in sorted(os.listdir(CGROUP_ROOT)):
            d = os.path.join(CGROUP_ROOT, controller, "slurm_" + self.node)
            if os.path.isdir(d) and not os.path.islink(d):
                found.append(d)
        return found

    def _kill_job_processes(self):
        """SIGKILL what is left in the node's cgroups (job processes, slurmstepd): after slurmd."""
        for _ in range(20):
            pids = set()
            for top in self._slurm_cgroup_dirs():
                for d, _subdirs, files in os.walk(top):
                    if "cgroup.procs" in files:
                        try:
                            with open(os.path.join(d, "cgroup.procs")) as f:
                                pids.update(int(p) for p in f.read().split())
                        except OSError:
                            pass
            pids.discard(os.getpid())
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)

    def _remove_cgroups(self):
        """Remove slurm's cgroup directories, deepest first (rmdir; busy ones are left)."""
        for top in self._slurm_cgroup_dirs():
            for d, _subdirs, _files in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                try:
                    os.rmdir(d)
                except OSError:
                    pass

    def leftovers(self):
        """What of the cluster still exists (daemons by PID, slurm's cgroups): [] after stop()."""
        left = []
        for name, pid in sorted(self.pids.items()):
            try:
                with open("/proc/%d/stat" % pid) as f:
                    if f.read().rsplit(") ", 1)[1].split()[0] != "Z":
                        left.append("%s (pid %d)" % (name, pid))
            except (FileNotFoundError, ProcessLookupError):
                pass
        return left + self._slurm_cgroup_dirs()

    # -- cgroups --------------------------------------------------------------------

    @staticmethod
    def memory_limit(proc_cgroup_text):
        """(cgroup path, limit in bytes) of the memory cgroup named in a /proc/PID/cgroup text.

        Other lines (a job's log around the copied text) are skipped. The limit is the
        smallest set on the path from that cgroup up to the root (v1 ``memory.limit_in_bytes``,
        v2 ``memory.max``): SLURM sets it on the step and the job, not the task. None when
        none is set.
        """
        version = cgroup_version()
        for line in proc_cgroup_text.splitlines():
            number, _, rest = line.partition(":")
            controllers, _, path = rest.partition(":")
            if not number.isdigit() or not path.startswith("/"):
                continue
            if controllers == ("" if version == 2 else "memory"):
                break
        else:
            raise ValueError("no memory cgroup in %r" % proc_cgroup_text)
        base = os.path.join(CGROUP_ROOT, "memory") if version == 1 else CGROUP_ROOT
        name = "memory.limit_in_bytes" if version == 1 else "memory.max"
        limits, d = [], path
        while d not in ("", "/"):
            try:
                with open(base + d + "/" + name) as f:
                    value = f.read().strip()
            except FileNotFoundError:
                value = "max"
            if value != "max" and int(value) < 2**62:
                limits.append(int(value))
            d = os.path.dirname(d)
        return path, (min(limits) if limits else None)

    # -- paths and logs -------------------------------------------------------------

    def path(self, *parts):
        """A path inside the cluster's directory."""
        return os.path.join(self.dir, *parts)

    def logs(self, lines=30):
        """The last LINES of each daemon's log, for a failure message."""
        out = []
        for name in sorted(os.listdir(self.path("log"))) if self.dir else []:
            with open(self.path("log", name), errors="replace") as f:
                tail = f.read().splitlines()[-lines:]
            out.append("== %s\n%s" % (name, "\n".join(tail)))
        return "\n".join(out)

    # -- commands -------------------------------------------------------------------

    def run(self, *argv, check=True, user=None, env=None, cwd=None, timeout=30):
        """Run a SLURM client against this cluster: as root, or as USER (runuser); its output.

        Raises with the client's stderr when it fails and CHECK is set.
        """
        argv = list(argv)
        if user is not None:
            argv = ["runuser", "-u", user, "--"] + argv
        proc = subprocess.run(argv, env=env or self.env, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError("%s exited %s: %s" % (" ".join(argv), proc.returncode, proc.stderr.strip()))
        return proc

    # -- the test user's files ------------------------------------------------------

    def workdir(self, name="job"):
        """A fresh working directory (``work/<n>-NAME``), owned by the test user."""
        self._count += 1
        d = self.path("work", "%d-%s" % (self._count, name))
        os.mkdir(d, 0o755)
        os.chown(d, self.uid, self.gid)
        return d

    def watchdog_bin(self):
        """A copy of the watchdog binary ($WATCHDOG_BIN or target/debug/watchdog) the user can run."""
        copy = self.path("bin", "watchdog")
        if not os.path.exists(copy):
            binary = os.environ.get("WATCHDOG_BIN") or os.path.join(REPO, "target", "debug", "watchdog")
            need.require(os.path.exists(binary), "the built watchdog binary (%s; cargo build)" % binary)
            shutil.copy2(binary, copy)
            os.chmod(copy, 0o755)
        return copy

    def pythonpath(self):
        """A copy of python/ the user can read: PYTHONPATH for ``import training_watchdog``."""
        copy = self.path("python")
        if not os.path.exists(copy):
            shutil.copytree(os.path.join(REPO, "python", "training_watchdog"),
                            os.path.join(copy, "training_watchdog"),
                            ignore=shutil.ignore_patterns("__pycache__", "*.so"))
            for d, _subdirs, files in os.walk(copy):
                os.chmod(d, 0o755)
                for name in files:
                    os.chmod(os.path.join(d, name), 0o644)
        return copy

    # -- jobs -----------------------------------------------------------------------

    def user_env(self, extra=None):
        """The environment the test user submits with (and so the job's, sbatch exports it).

        A clean one, not root's: PATH (the cluster's bin/ first, where ``watchdog_bin()`` puts
        the binary), HOME (the cluster's work/), SLURM_CONF, PYTHONPATH with the copy of the
        client, and EXTRA.
        """
        env = {"PATH": self.path("bin") + ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
               "HOME": self.path("work"),
               "USER": USER, "LOGNAME": USER, "LANG": "C.UTF-8", "SLURM_CONF": self.conf,
               "PYTHONPATH": self.pythonpath()}
        env.update(extra or {})
        return env

    def sbatch(self, script_text, *args, workdir=None, env=None):
        """Submit SCRIPT_TEXT as the test user with ARGS; return the job ID (an int).

        The script is written to WORKDIR (a fresh one when not given) and runs there; output
        goes to ``slurm-<id>.out`` there, appended (a requeued job keeps its first run's
        output). The job's environment is ``user_env(ENV)``.
        """
        if workdir is None:
            workdir = self.workdir()
        self._count += 1
        script = os.path.join(workdir, "job-%d.sh" % self._count)
        self._write(script, script_text, 0o755)
        os.chown(script, self.uid, self.gid)
        out = self.run("sbatch", "--parsable", "--open-mode=append", "--chdir=" + workdir,
                       "--output=" + os.path.join(workdir, "slurm-%j.out"), *args, script,
                       user=USER, cwd=workdir, env=self.user_env(env)).stdout
        jobid = int(out.strip().split(";")[0])
        self._workdirs[jobid] = workdir
        return jobid

    def job(self, jobid):
        """The job's fields from ``scontrol show job -o ID`` as a dict; None once it is gone."""
        proc = self.run("scontrol", "show", "job", "-o", str(jobid), check=False)
        if proc.returncode != 0 or not proc.stdout.strip():
            return None
        return parse_job_line(proc.stdout.splitlines()[0])

    def wait_for(self, jobid, predicate, timeout):
        """Poll the job until PREDICATE(fields) holds; return the fields.

        PREDICATE is called with None once the job is gone; if it does not accept that, or
        TIMEOUT seconds pass, this raises AssertionError with the last fields and the job's
        output.
        """
        deadline = time.monotonic() + timeout
        while True:
            last = self.job(jobid)
            if predicate(last):
                return last
            if last is None or time.monotonic() > deadline:
                raise AssertionError("job %s: %s; last seen %r\n%s" % (
                    jobid, "gone" if last is None else "timed out after %ss" % timeout,
                    last, self.log_of(jobid)))
            time.sleep(0.5)

    def wait_until(self, predicate, timeout, what="the condition"):
        """Poll PREDICATE() every half second until it returns something true; return that.

        Raises AssertionError after TIMEOUT seconds, with the daemons' logs.
        """
        deadline = time.monotonic() + timeout
        while True:
            got = predicate()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError("%s did not hold within %ss\n%s" % (what, timeout, self.logs(10)))
            time.sleep(0.5)

    def release(self, jobid):
        """Lift the hold SLURM puts on a requeued job (``Reason=BeginTime``): start it now.

        First waits (up to 30 s) until the first run's cgroups are gone: a job started again
        while slurmd still removes them failed at once (exit 1) on a busy machine.
        """
        def cleaned():
            return not any(os.path.isdir(os.path.join(top, d, "job_%d" % jobid))
                           for top in self._slurm_cgroup_dirs()
                           for d in (os.listdir(top) if os.path.isdir(top) else []))
        self.wait_until(cleaned, 30, "the cgroups of job %d's first run removed" % jobid)
        self.run("scontrol", "update", "JobId=%d" % jobid, "StartTime=now")

    def log_of(self, jobid):
        """The job's output file (``slurm-<id>.out`` in its working directory); '' if none yet."""
        workdir = self._workdirs.get(jobid)
        if workdir is None:
            return ""
        try:
            with open(os.path.join(workdir, "slurm-%d.out" % jobid), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""
