"""Which checkpoint a run resumes from: the one the watchdog saw acknowledged, else the newest complete one.

``watchdog run --restart N`` starts the command again after a death it can recover from and
sets ``WATCHDOG_RESUME_FROM`` to the last checkpoint a callback acknowledged (path and step,
after the framework's save returned) that still exists unchanged. The framework helpers
(:func:`training_watchdog.lightning.latest_checkpoint`,
:func:`training_watchdog.transformers.resume_checkpoint`) answer with it when it is set, is
in the directory asked about and is complete; otherwise with the newest complete checkpoint
in that directory; otherwise None, a fresh start. A checkpoint is complete when what its
framework writes last is there and whole, so a save the run died in is never chosen. Each
answer is said in one line on stderr, with the step.

Standard library only: the framework modules import this one.
"""

import os
import sys
import zipfile

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
    skipped = []
    for step, path in sorted(candidates(), key=_newest_first):
        if complete(path):
            why = "the newest complete %s in %s" % (what, dirpath)
            if skipped:
                why += "; skipped, incomplete: %s" % ", ".join(skipped)
            if notes:
                why += "; " + "; ".join(notes)
            _say("resuming at step %s from %s, %s%s" % (_step_text(step_of(path)), path, why, _context()))
            return path
        skipped.append(os.path.basename(path))
    why = "no complete %s in %s" % (what, dirpath)
    if skipped:
        why += " (incomplete: %s)" % ", ".join(skipped)
    if notes:
        why += "; " + "; ".join(notes)
    _say("%s: a fresh start%s" % (why, _context()))
    return None


def _newest_first(candidate):
    step, path = candidate
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        mtime = 0
    return (-step, -mtime, path)


def _step_text(step):
    return "?" if step is None else str(step)
