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

What a framework helper reads of a checkpoint (a ``trainer_state.json``, a ``.ckpt`` zip's
central directory) is read as the client reads any file a run or a user could have placed
(:func:`read_json`, :func:`whole_torch_zip`): opened without blocking (a FIFO, a device),
a regular file by ``fstat`` of what was opened, at most so many bytes. A file that is not is
said once on stderr, with why, and its checkpoint is not complete: it is passed over.

Standard library only: the framework modules import this one.
"""

import os
import sys
import zipfile

from training_watchdog import _files, _messages
from training_watchdog import record as _record

__all__ = ["choose", "read_json", "whole_torch_zip"]

#: The most of a ``.ckpt`` zip :func:`whole_torch_zip` reads: its end record and central
#: directory (a few hundred bytes per tensor), never the tensors.
MAX_ZIP_DIRECTORY_BYTES = 64 * 1024 * 1024
# path -> why it was last refused: said once, not at every look.
_refused = {}


def whole_torch_zip(path):
    """Whether ``path`` is a whole ``torch.save`` file: a zip whose central directory, written
    last, is there and lists a ``data.pkl``, and whose every member lies inside the file.

    A file cut short anywhere lacks the end-of-central-directory record at its end
    (``zipfile`` then raises ``BadZipFile``); the members' extents catch a directory that
    names more than the file holds. Read with the client's bounds: through a link the user
    named, but a regular file, opened without blocking, and at most
    :data:`MAX_ZIP_DIRECTORY_BYTES` read.
    """
    try:
        opened = _files._open_regular(path, follow=True)
    except _files._Unfit as e:
        _refuse(path, str(e))
        return False
    if opened is None:
        return False
    fd, st = opened
    try:
        with os.fdopen(fd, "rb") as f, zipfile.ZipFile(_Capped(f, MAX_ZIP_DIRECTORY_BYTES)) as z:
            infos = z.infolist()
    except _TooMuch:
        _refuse(path, "its zip directory is more than the %d bytes read" % MAX_ZIP_DIRECTORY_BYTES)
        return False
    except (OSError, zipfile.BadZipFile, ValueError, EOFError, OverflowError):
        return False
    if not any(i.filename.endswith("data.pkl") for i in infos):
        return False
    return all(i.header_offset + i.compress_size <= st.st_size for i in infos)


def read_json(path, limit):
    """The JSON object in ``path``, or None: when it is missing, not whole JSON (a save cut
    short), or not a regular file of at most ``limit`` bytes (said once on stderr, with why:
    a FIFO is never waited on). Never raises."""
    try:
        data = _files._read_capped(path, limit)
        return None if data is None else _files._parse_object(data)
    except _files._Unfit as e:
        why = str(e)
        if why.startswith(("not a JSON object", "JSON nested")):
            return None  # cut short or not the framework's: incomplete, as choose() says
        _refuse(path, why)
        return None
    except Exception as e:  # a reader of a hint never ends the run
        _refuse(path, _messages._failure(e))
        return None


class _TooMuch(Exception):
    """More of a file was asked for than its reader's cap."""


class _Capped:
    """A binary file, read at most ``limit`` bytes in all (:class:`_TooMuch` past that): what
    ``zipfile`` reads of a zip is then bounded, whatever its end record claims."""

    def __init__(self, f, limit):
        self._f, self._left = f, limit

    def read(self, n=-1):
        if n is not None and n > self._left:
            raise _TooMuch()
        data = self._f.read(self._left + 1 if n is None or n < 0 else n)
        if len(data) > self._left:
            raise _TooMuch()
        self._left -= len(data)
        return data

    def seek(self, offset, whence=0):
        return self._f.seek(offset, whence)

    def tell(self):
        return self._f.tell()

    def seekable(self):
        return True


def _refuse(path, why):
    """Says once on stderr that ``path`` is not read, and why."""
    if _refused.get(path) == why:
        return
    _refused[path] = why
    _say("not reading %s: %s; its checkpoint is passed over" % (path, why))


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
