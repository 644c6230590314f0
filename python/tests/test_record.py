"""The checkpoint record (training_watchdog.record) and the resume order that reads it.

Real files on disk: records written as ``watchdog run`` writes them (version 1, paths
relative to the record where they can be), checkpoints measured after they were written,
then rewritten, deleted, or claimed by another job in the same directory. The resume order
is tested through ``resume.choose`` with a framework of two lines (a file is complete when
it ends in ``END``), so these tests need no torch; test_resume.py runs the same order
through the Lightning and Transformers helpers.
"""

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from training_watchdog import record, resume  # noqa: E402

ENV = ("WATCHDOG_RESUME_FROM", "WATCHDOG_RESTART", "WATCHDOG_LAST_VERDICT", "WATCHDOG_CHECKPOINT_RECORD",
       "WATCHDOG_RUN_KEY", "SLURM_JOB_ID")


class Env(unittest.TestCase):
    """Each test starts without the variables the record and resume read, in a directory of its own."""

    def setUp(self):
        saved = {k: os.environ.pop(k, None) for k in ENV}

        def restore():
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v

        self.addCleanup(restore)
        self.dir = os.path.realpath(tempfile.mkdtemp(prefix="tw-record-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.ckpts = os.path.join(self.dir, "ckpts")
        os.makedirs(self.ckpts)
        self.record = os.path.join(self.dir, ".watchdog-checkpoints.json")
        os.environ["WATCHDOG_CHECKPOINT_RECORD"] = self.record
        self.entries = []

    def said(self, fn, *args):
        """(fn's answer, the lines it wrote on stderr)."""
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            answer = fn(*args)
        return answer, err.getvalue().splitlines()

    def save(self, step, whole=True, name=None):
        """A checkpoint file in self.ckpts, complete when it ends in END."""
        path = os.path.join(self.ckpts, name or "ckpt-%d.bin" % step)
        with open(path, "wb") as f:
            f.write(os.urandom(100 + step) + (b"END" if whole else b""))
        return path

    def ack(self, key, path, step, attempt=1, verdict=None, relative=True):
        """Records ``path`` as the watchdog does after an acknowledgment: measured now."""
        st = os.stat(path)
        if os.path.isdir(path):
            size, newest = 0, st.st_mtime_ns
            for root, dirs, files in os.walk(path):
                for name in dirs + files:
                    m = os.lstat(os.path.join(root, name))
                    newest = max(newest, m.st_mtime_ns)
                    if name in files:
                        size += m.st_size
        else:
            size, newest = st.st_size, st.st_mtime_ns
        shown = os.path.relpath(path, os.path.dirname(self.record)) if relative else path
        self.entries.append({"key": key, "path": shown, "step": step, "size": size, "mtime_ns": newest,
                             "time_unix": 1718000000.5 + len(self.entries), "attempt": attempt,
                             "verdict": verdict})
        self.write({"version": 1, "entries": self.entries})

    def write(self, value, path=None):
        data = value if isinstance(value, bytes) else json.dumps(value).encode()
        with open(path or self.record, "wb") as f:
            f.write(data)

    def choose(self, dirpath=None):
        """resume.choose over self.ckpts's ckpt-N.bin files: (answer, stderr lines)."""
        dirpath = dirpath or self.ckpts

        def candidates():
            found = []
            for name in os.listdir(dirpath):
                if name.startswith("ckpt-") and name.endswith(".bin"):
                    found.append((int(name[5:-4]), os.path.join(dirpath, name)))
            return found

        def step_of(path):
            name = os.path.basename(path)
            return int(name[5:-4]) if name.startswith("ckpt-") else None

        return self.said(resume.choose, dirpath, candidates, ends_in_end, step_of, "test checkpoint")


def ends_in_end(path):
    """The test framework's completeness check: the file ends in END."""
    with open(path, "rb") as f:
        return f.read().endswith(b"END")


class RunKey(Env):
    def test_watchdog_run_key_then_the_slurm_job_then_default(self):
        self.assertEqual(record.run_key({}), "default")
        self.assertEqual(record.run_key({"SLURM_JOB_ID": "4242"}), "slurm-4242")
        self.assertEqual(record.run_key({"SLURM_JOB_ID": "4242", "WATCHDOG_RUN_KEY": "bert-1"}), "bert-1")
        self.assertEqual(record.run_key({"SLURM_JOB_ID": "", "WATCHDOG_RUN_KEY": ""}), "default")
        os.environ["SLURM_JOB_ID"] = "77"
        self.assertEqual(record.run_key(), "slurm-77")

    def test_the_record_is_named_by_the_environment_else_in_the_current_directory(self):
        self.assertEqual(record.record_path(), self.record)
        del os.environ["WATCHDOG_CHECKPOINT_RECORD"]
        cwd = os.getcwd()
        self.addCleanup(os.chdir, cwd)
        os.chdir(self.ckpts)
        self.assertEqual(record.record_path(), os.path.join(self.ckpts, ".watchdog-checkpoints.json"))


class Read(Env):
    def test_no_record_is_an_empty_one_said_nothing(self):
        self.assertEqual(self.said(record.read), ([], []))

    def test_relative_paths_are_taken_from_the_records_directory_and_absolute_ones_as_they_are(self):
        a, b = self.save(1), self.save(2)
        self.ack("k", a, 1)
        self.ack("k", b, None, relative=False, attempt=2, verdict="runtime_limit")
        self.assertEqual(self.entries[0]["path"], "ckpts/ckpt-1.bin")
        # read from elsewhere: relative paths do not depend on the current directory
        cwd = os.getcwd()
        self.addCleanup(os.chdir, cwd)
        os.chdir(self.ckpts)
        got, err = self.said(record.read)
        self.assertEqual(err, [])
        self.assertEqual([(e.key, e.path, e.step, e.attempt, e.verdict) for e in got],
                         [("k", a, 1, 1, None), ("k", b, None, 2, "runtime_limit")])
        self.assertEqual(got[0].recorded_path, "ckpts/ckpt-1.bin")
        self.assertEqual(record.measure(a), (got[0].size, got[0].mtime_ns))

    def test_fields_a_later_writer_adds_are_ignored(self):
        a = self.save(1)
        self.ack("k", a, 1)
        self.entries[0]["sha256"] = "ab" * 32
        self.write({"version": 1, "entries": self.entries, "writer": "watchdog 9.9"})
        self.assertEqual([e.path for e in self.said(record.read)[0]], [a])

    def assert_refused(self, why, path=None):
        got, err = self.said(record.read, path)
        self.assertEqual(got, [])
        self.assertEqual(len(err), 1, err)
        self.assertIn("not reading the checkpoint record %s: " % (path or self.record), err[0])
        self.assertIn(why, err[0])
        self.assertIn("taken as no record", err[0])

    def test_garbage_and_wrong_types_are_no_record_and_one_line(self):
        good = {"key": "k", "path": "a", "step": 1, "size": 1, "mtime_ns": 1, "time_unix": 1.0,
                "attempt": 1, "verdict": None}
        cases = [
            (b"", "not a JSON object"),
            (b"{\"version\": 1, \"entries\": [", "not a JSON object"),
            (b"\xff\xfe{}", "not a JSON object"),
            (b"[1, 2]", "not a JSON object"),
            (b"[" * 30000 + b"]" * 30000, "JSON nested too deeply"),
            ({"entries": []}, "no integer \"version\""),
            ({"version": "1", "entries": []}, "no integer \"version\""),
            ({"version": True, "entries": []}, "no integer \"version\""),
            ({"version": 2, "entries": []}, "version 2, expected 1"),
            ({"version": 1, "entries": {}}, "\"entries\" is not a list"),
            ({"version": 1, "entries": [good, 7]}, "entry 1"),
        ]
        for field, value in [("key", ""), ("key", 3), ("path", ""), ("path", None), ("path", "a\0b"),
                             ("step", -1), ("step", "5"), ("step", True), ("size", -1), ("size", 1.5),
                             ("mtime_ns", None), ("time_unix", "now"), ("time_unix", float("nan")),
                             ("attempt", None), ("verdict", 3)]:
            bad = dict(good, **{field: value})
            cases.append(({"version": 1, "entries": [good, bad]}, "entry 1: \"%s\"" % field))
        missing = dict(good)
        del missing["size"]
        cases.append(({"version": 1, "entries": [missing]}, "entry 0: \"size\" is None"))
        for value, why in cases:
            with self.subTest(value=repr(value)[:60]):
                self.write(value)
                self.assert_refused(why)

    def test_a_symbolic_link_is_never_followed(self):
        a = self.save(1)
        self.ack("k", a, 1)
        real = os.path.join(self.dir, "real.json")
        os.rename(self.record, real)
        os.symlink(real, self.record)
        self.assert_refused("symbolic link")
        self.assertEqual(len(self.said(record.read, real)[0]), 1)

    def test_an_oversized_record_is_not_read_but_one_a_little_over_64_kib_is(self):
        a = self.save(1)
        self.ack("k", a, 1)
        entry = self.entries[0]
        padded = {"version": 1, "entries": [entry], "pad": "x" * (70 * 1024)}
        self.write(padded)
        self.assertEqual(len(self.said(record.read)[0]), 1)
        padded["pad"] = "x" * (200 * 1024)
        self.write(padded)
        self.assert_refused("bytes, more than the")

    def test_a_fifo_or_a_directory_is_refused_without_blocking(self):
        os.mkfifo(self.record)
        self.assert_refused("not a regular file")
        os.remove(self.record)
        os.mkdir(self.record)
        self.assert_refused("not a regular file")

    @unittest.skipUnless(hasattr(os, "geteuid") and os.geteuid() == 0, "needs root to give a file away")
    def test_a_record_another_user_wrote_is_refused(self):
        a = self.save(1)
        self.ack("k", a, 1)
        os.chown(self.record, 65534, 65534)
        self.assert_refused("owned by uid 65534, not by this user (uid 0)")


class Measure(Env):
    def test_a_directory_is_the_sum_of_its_files_and_its_newest_time_links_not_followed(self):
        ck = os.path.join(self.ckpts, "checkpoint-4")
        os.makedirs(os.path.join(ck, "sub"))
        for name, n in (("model.safetensors", 300), ("sub/optimizer.pt", 200)):
            with open(os.path.join(ck, name), "wb") as f:
                f.write(b"x" * n)
        big = os.path.join(self.dir, "big")
        with open(big, "wb") as f:
            f.write(b"x" * 10000)
        os.symlink(big, os.path.join(ck, "link"))
        size, mtime = record.measure(ck)
        self.assertEqual(size, 300 + 200 + len(big))  # the link's own size, not its target's
        os.utime(os.path.join(ck, "sub", "optimizer.pt"), ns=(mtime + 5, mtime + 5))
        self.assertEqual(record.measure(ck), (size, mtime + 5))
        self.assertIsNone(record.measure(os.path.join(self.ckpts, "missing")))

    def test_a_file_is_its_size_and_its_time(self):
        a = self.save(3)
        st = os.stat(a)
        self.assertEqual(record.measure(a), (st.st_size, st.st_mtime_ns))


class ResumeOrder(Env):
    def test_two_keys_in_one_directory_each_resume_from_their_own(self):
        a10 = self.save(10)
        self.ack("slurm-100", a10, 10)
        b20 = self.save(20)
        self.ack("slurm-200", b20, 20, verdict="runtime_limit")
        os.environ["SLURM_JOB_ID"] = "100"
        path, err = self.choose()
        self.assertEqual(path, a10)
        self.assertEqual(len(err), 1, err)
        self.assertIn("resuming at step 10 from %s, the newest complete checkpoint of run key slurm-100 in "
                      "the record %s (attempt 1)" % (a10, self.record), err[0])
        os.environ["SLURM_JOB_ID"] = "200"
        path, err = self.choose()
        self.assertEqual(path, b20)
        self.assertIn("run key slurm-200", err[0])
        self.assertIn("(attempt 1, runtime_limit)", err[0])

    def test_the_record_comes_before_a_newer_checkpoint_in_the_directory(self):
        mine = self.save(10)
        self.ack("default", mine, 10)
        self.save(30)  # not in the record: someone's periodic save, or ours never acknowledged
        self.assertEqual(self.choose()[0], mine)

    def test_watchdog_resume_from_still_comes_first(self):
        mine = self.save(10)
        self.ack("default", mine, 10)
        named = self.save(12)
        os.environ.update(WATCHDOG_RESUME_FROM=named, WATCHDOG_RESTART="1", WATCHDOG_LAST_VERDICT="oom_kill")
        path, err = self.choose()
        self.assertEqual(path, named)
        self.assertIn("the last checkpoint the watchdog saw acknowledged (restart 1 after oom_kill)", err[0])

    def test_the_directory_fallback_never_returns_another_keys_checkpoint(self):
        # pytorch-lightning #12369: two requeued jobs in one directory loaded each other's
        old = self.save(5)
        mine = self.save(10)
        self.ack("slurm-100", mine, 10)
        theirs = self.save(20)
        self.ack("slurm-200", theirs, 20)
        with open(mine, "ab") as f:  # ours was rewritten since: no longer what was recorded
            f.write(b"more END")
        os.environ["SLURM_JOB_ID"] = "100"
        path, err = self.choose()
        self.assertEqual(len(err), 1, err)
        # ckpt-10 is complete again and no other key's: the directory may offer it; ckpt-20 never
        self.assertEqual(path, mine)
        self.assertIn("the newest complete test checkpoint in %s" % self.ckpts, err[0])
        self.assertIn("passed over as other run keys' in the record (this run's is slurm-100; to continue "
                      "another, set WATCHDOG_RUN_KEY to its key): ckpt-20.bin (slurm-200)", err[0])
        self.assertIn("the record's 1 checkpoint(s) of run key slurm-100 here are changed since", err[0])
        os.remove(mine)
        self.assertEqual(self.choose()[0], old)
        os.remove(old)
        path, err = self.choose()
        self.assertIsNone(path)
        self.assertIn("no complete test checkpoint in %s; passed over" % self.ckpts, err[0])
        self.assertIn("a fresh start", err[0])
        os.environ["WATCHDOG_RUN_KEY"] = "slurm-200"  # continuing job 200's run in a new job
        self.assertEqual(self.choose()[0], theirs)

    def test_a_path_last_recorded_by_this_key_is_not_another_keys(self):
        shared = self.save(10, name="ckpt-10.bin")
        self.ack("slurm-200", shared, 10)
        self.save(10, name="ckpt-10.bin")  # job 100 saved the same name over it
        self.ack("slurm-100", shared, 10)
        self.assertEqual(record.claimed_by_others("slurm-100", record.read()), {})
        self.assertEqual(record.claimed_by_others("slurm-200", record.read()), {shared: "slurm-100"})

    def test_a_changed_checkpoint_is_not_offered(self):
        for change in ("size", "mtime", "gone", "incomplete"):
            with self.subTest(change=change):
                self.entries = []
                older = self.save(3)
                self.ack("default", older, 3)
                newest = self.save(7)
                self.ack("default", newest, 7)
                st = os.stat(newest)
                if change == "size":
                    with open(newest, "ab") as f:
                        f.write(b"END")
                    os.utime(newest, ns=(st.st_atime_ns, st.st_mtime_ns))
                elif change == "mtime":
                    os.utime(newest, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
                elif change == "gone":
                    os.remove(newest)
                else:  # recorded as it is, but the framework says it is not whole
                    with open(newest, "wb") as f:
                        f.write(b"half")
                    self.entries.pop()
                    self.ack("default", newest, 7)
                entry = record.newest_complete(self.ckpts, ends_in_end)
                self.assertEqual(entry.path, older)
                for name in os.listdir(self.ckpts):
                    os.remove(os.path.join(self.ckpts, name))

    def test_the_slurm_key_finds_a_requeued_jobs_checkpoint(self):
        mine = self.save(40)
        self.ack("slurm-4242", mine, 40, attempt=1, verdict="runtime_limit")
        self.ack("slurm-999", self.save(50), 50)
        os.environ.update(SLURM_JOB_ID="4242", WATCHDOG_RESTART="1", WATCHDOG_LAST_VERDICT="runtime_limit")
        path, err = self.choose()
        self.assertEqual(path, mine)
        self.assertTrue(err[0].endswith("(attempt 1, runtime_limit) (restart 1 after runtime_limit)"), err)

    def test_an_entry_in_another_directory_is_not_this_directorys(self):
        other = os.path.join(self.dir, "other")
        os.makedirs(other)
        elsewhere = os.path.join(other, "ckpt-90.bin")
        with open(elsewhere, "wb") as f:
            f.write(b"END")
        self.ack("default", elsewhere, 90)
        mine = self.save(2)
        self.assertEqual(self.choose()[0], mine)
        self.assertEqual(self.choose(other)[0], elsewhere)

    def test_a_record_given_by_checkpoint_record_elsewhere_with_relative_paths(self):
        self.record = os.path.join(self.dir, "state", "run.json")
        os.makedirs(os.path.dirname(self.record))
        os.environ["WATCHDOG_CHECKPOINT_RECORD"] = self.record
        mine = self.save(8)
        self.ack("default", mine, 8)
        self.assertEqual(self.entries[0]["path"], "../ckpts/ckpt-8.bin")
        self.save(9)
        self.assertEqual(self.choose()[0], mine)

    def test_a_garbage_record_falls_back_to_the_directory_with_one_warning(self):
        newest = self.save(9)
        self.write(b"not json")
        path, err = self.choose()
        self.assertEqual(path, newest)
        self.assertEqual(len(err), 2, err)
        self.assertIn("not reading the checkpoint record", err[0])
        self.assertIn("resuming at step 9 from %s, the newest complete test checkpoint" % newest, err[1])

    def test_a_directory_checkpoint_changed_inside_is_not_offered(self):
        def ckdir(step):
            path = os.path.join(self.ckpts, "ckpt-%d.bin" % step)  # a directory, named as the test framework names
            os.makedirs(path)
            with open(os.path.join(path, "state"), "wb") as f:
                f.write(b"x" * step)
            return path

        older, newest = ckdir(3), ckdir(6)
        self.ack("default", older, 3)
        self.ack("default", newest, 6)
        present = lambda p: os.path.exists(os.path.join(p, "state"))  # noqa: E731
        self.assertEqual(record.newest_complete(self.ckpts, present).path, newest)
        with open(os.path.join(newest, "state"), "ab") as f:
            f.write(b"y")
        self.assertEqual(record.newest_complete(self.ckpts, present).path, older)


if __name__ == "__main__":
    unittest.main()
