"""Which checkpoint a run resumes from: the one the watchdog saw acknowledged, else the newest complete one.

``watchdog run --restart N`` starts the command again after a death it can recover from and
sets ``WATCHDOG_RESUME_FROM`` to the last checkpoint a callback acknowledged (path and step,
after the framework's save returned) that still exists unchanged. The framework helpers
(:func:`training_watchdog.lightning.latest_checkpoint`,
:func:`training_watchdog.transformers.resume_checkpoint`) answer, in this order:

1. ``WATCHDOG_RESUME_FROM``, when it is set, is in the directory asked about and is complete;
2. this run key's newest entry in the watchdog's checkpoint record
   (:mod:`training_watchdog.record`) that is in that directory, unchanged since it was
   recorded and complete: what a requeued SLURM job, or a run started again by hand, had
   acknowledged before;
3. the newest complete checkpoint in that directory that no other run key claims in the
   record (two jobs in one directory never resume from each other's: pytorch-lightning
   #12369);
4. None, a fresh start.

A checkpoint is complete when what its framework writes last is there and whole, so a save
the run died in is never chosen. Each answer is said in one line on stderr, with the step.

Standard library only: the framework modules import this one.
"""

import os
import sys
import zipfile

from training_watchdog import record as _record

__all__ = ["choose", "whole_torch_zip"]


def whole_torch_zip(path):
    """Whether ``path`` is a whole ``torch.save`` file: a zip whose central directory, written
    last, is there and lists a ``data.pkl``, and whose every member lies inside the file.

    A file cut short anywhere lacks the end-of-central-directory record at its end
    (``zipfile`` then raises ``BadZipFile``); the members' extents catch a directory that
    names more than the file holds.
    """
    try:
        size = os.path.getsize(path)
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return False
    if not any(i.filename.endswith("data.pkl") for i in infos):
        return False
    return all(i.header_offset + i.compress_size <= size for i in infos)


def _same_dir(path, dirpath):
    return os.path.realpath(os.path.dirname(os.path.abspath(os.path.normpath(path)))) == os.path.realpath(dirpath)


def _context():
    """`` (restart 2 after oom_kill)`` from ``WATCHDOG_RESTART``/``WATCHDOG_LAST_VERDICT``, or ``""``."""
    attempt = os.environ.get("WATCHDOG_RESTART")
    if not attempt:
        return ""
    verdict = os.environ.get("WATCHDOG_LAST_VERDICT")
    return " (restart %s%s)" % (attempt, " after " + verdict if verdict else "")


def _say(text):
    sys.stderr.write("training_watchdog: %s\n" % text)
    sys.stderr.flush()


def choose(dirpath, candidates, complete, step_of, what):
    """The checkpoint to resume from in ``dirpath``, or None; says which on stderr.

    ``candidates()``: ``(step, path)`` of every checkpoint of this framework in ``dirpath``
    (the step from its name). ``complete(path)``: whether the framework finished writing it.
    ``step_of(path)``: the step it holds, or None when unknown. ``what``: the kind of
    checkpoint, for messages (``"Lightning .ckpt"``).

    In order: ``WATCHDOG_RESUME_FROM``; this run key's newest complete entry in the
    watchdog's checkpoint record (:mod:`training_watchdog.record`); the newest complete
    candidate that no other run key claims in the record; None.
    """
    dirpath = str(dirpath)
    notes = []
    named = os.environ.get("WATCHDOG_RESUME_FROM")
    if named:
        if not os.path.exists(named):
            notes.append("WATCHDOG_RESUME_FROM=%s no longer exists" % named)
        elif not _same_dir(named, dirpath):
            notes.append("WATCHDOG_RESUME_FROM=%s is not in %s" % (named, dirpath))
        elif not complete(named):
            notes.append("WATCHDOG_RESUME_FROM=%s is not a complete %s" % (named, what))
        else:
            _say("resuming at step %s from %s, the last checkpoint the watchdog saw acknowledged%s"
                 % (_step_text(step_of(named)), named, _context()))
            return named
    key, where = _record.run_key(), _record.record_path()
    entries = _record.read(where)
    mine = _record.newest_complete(dirpath, complete, key, entries)
    if mine is not None:
        step = mine.step if mine.step is not None else step_of(mine.path)
        why = "the newest complete checkpoint of run key %s in the record %s (attempt %d%s)" % (
            key, where, mine.attempt, ", " + mine.verdict if mine.verdict else "")
        if notes:
            why += "; " + "; ".join(notes)
        _say("resuming at step %s from %s, %s%s" % (_step_text(step), mine.path, why, _context()))
        return mine.path
    stale = [e for e in _record.entries(key, entries) if _same_dir(e.path, dirpath)]
    if stale:
        notes.append("the record's %d checkpoint(s) of run key %s here are changed since, gone or incomplete"
                     % (len(stale), key))
    others = _record.claimed_by_others(key, entries)
    skipped, claimed = [], []
    for step, path in sorted(candidates(), key=_newest_first):
        owner = others.get(os.path.realpath(path))
        if owner is not None:
            claimed.append("%s (%s)" % (os.path.basename(path), owner))
            continue
        if complete(path):
            why = "the newest complete %s in %s" % (what, dirpath)
            if skipped:
                why += "; skipped, incomplete: %s" % ", ".join(skipped)
            if claimed:
                why += "; " + _claimed_text(claimed, key)
            if notes:
                why += "; " + "; ".join(notes)
            _say("resuming at step %s from %s, %s%s" % (_step_text(step_of(path)), path, why, _context()))
            return path
        skipped.append(os.path.basename(path))
    why = "no complete %s in %s" % (what, dirpath)
    if skipped:
        why += " (incomplete: %s)" % ", ".join(skipped)
    if claimed:
        why += "; " + _claimed_text(claimed, key)
    if notes:
        why += "; " + "; ".join(notes)
    _say("%s: a fresh start%s" % (why, _context()))
    return None


def _claimed_text(claimed, key):
    return ("passed over as other run keys' in the record (this run's is %s; to continue another, set "
            "WATCHDOG_RUN_KEY to its key): %s" % (key, ", ".join(claimed)))


def _newest_first(candidate):
    step, path = candidate
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        mtime = 0
    return (-step, -mtime, path)


def _step_text(step):
    return "?" if step is None else str(step)
