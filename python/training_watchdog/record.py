"""Reads the watchdog's checkpoint record: which checkpoints each run key had acknowledged.

``watchdog run`` keeps what it knows of acknowledged checkpoints in a file that outlives the
job and the node: ``.watchdog-checkpoints.json`` in the run's working directory, or the path
given by ``--checkpoint-record``, named to the run as ``WATCHDOG_CHECKPOINT_RECORD``. It is::

    {"version": 1, "entries": [{"key": "slurm-4242", "path": "ckpt/watchdog-step=40.ckpt",
                                "step": 40, "size": 1048576, "mtime_ns": 1718000000123456789,
                                "time_unix": 1718000000.5, "attempt": 1, "verdict": null}, ...]}

oldest first, at most 100 entries or 64 KiB, written by the watchdog alone (the run's own
user, through a temporary file and a rename). ``path`` is relative to the record's
directory where it can be, else absolute; ``step`` and ``verdict`` may be null. ``key`` is
the run key (:func:`run_key`): two jobs that share a directory tell their checkpoints apart
by it (pytorch-lightning #12369: two requeued jobs loaded each other's).

This module only reads it, as the client reads any file a user could have placed: never
through a symbolic link, a regular file owned by this user, at most 64 KiB and a margin.
Anything else (not JSON, another version, a field of the wrong type) is one warning line on
stderr and counts as no record: the run then resumes as it would without one.

An entry is still what was recorded when its checkpoint has the recorded size and newest
modification time (:func:`measure`, as the watchdog measures it); a checkpoint rewritten or
deleted since is never offered. Standard library only.
"""

import collections
import math
import os
import stat
import sys

from training_watchdog import _files, _messages

__all__ = ["Entry", "RECORD_NAME", "record_path", "run_key", "read", "entries", "newest_complete",
           "claimed_by_others", "measure"]

#: The record's name in the run's working directory when ``WATCHDOG_CHECKPOINT_RECORD`` is unset.
RECORD_NAME = ".watchdog-checkpoints.json"
#: The only version this reader knows.
VERSION = 1
# The writer keeps the record under 64 KiB; the margin takes a writer a little over it.
_MAX_RECORD_BYTES = 64 * 1024 + 16 * 1024
# Entries a directory checkpoint's walk looks at before it stops (MAX_ENTRIES in
# crates/watchdog-watch/src/watch/restart.rs, whose measure() this one mirrors).
_MAX_WALK = 100_000

Entry = collections.namedtuple("Entry", "key path step size mtime_ns time_unix attempt verdict recorded_path")
Entry.__doc__ = """One acknowledged checkpoint in the record. ``path``: absolute (a relative one is taken
from the record's directory); ``recorded_path``: as written. ``step``, ``verdict``: None when
unknown. ``size``: bytes (a directory: the sum of what is in it); ``mtime_ns``: the newest
modification time in it, in nanoseconds since the epoch."""


class _Garbage(Exception):
    """A record that is not read: why, for the warning."""


def record_path():
    """``WATCHDOG_CHECKPOINT_RECORD`` when set, else ``.watchdog-checkpoints.json`` in the
    current directory; absolute (unless the current directory is gone)."""
    path = os.environ.get("WATCHDOG_CHECKPOINT_RECORD") or RECORD_NAME
    try:
        return os.path.abspath(path)
    except OSError:
        return path


def run_key(environ=None):
    """The run key, as the watchdog computes it: ``WATCHDOG_RUN_KEY`` when set and not empty,
    else ``slurm-<SLURM_JOB_ID>`` when that is set and not empty, else ``default``. A requeued
    SLURM job keeps its job ID, so its attempts share a key; two jobs do not."""
    environ = os.environ if environ is None else environ
    key = environ.get("WATCHDOG_RUN_KEY")
    if key:
        return key
    job = environ.get("SLURM_JOB_ID")
    if job:
        return "slurm-%s" % job
    return "default"


def read(path=None):
    """Every entry of the record at ``path`` (default :func:`record_path`), oldest first; an
    empty list when there is none. Never raises: a record that cannot be read as version 1
    is said in one line on stderr and taken as empty."""
    path = record_path() if path is None else str(path)
    try:
        path = os.path.abspath(path)
    except OSError:  # the current directory is gone, and a record in it with it
        return []
    try:
        data = _files._read_capped(path, _MAX_RECORD_BYTES, owner=os.geteuid())
        if data is None:
            return []
        return _parse(_files._parse_object(data), os.path.dirname(path))
    except (_files._Unfit, _Garbage) as e:
        why = str(e)
    except Exception as e:  # a reader of a hint never ends the run
        why = "%s: %s" % (type(e).__name__, e)
    sys.stderr.write("training_watchdog: not reading the checkpoint record %s: %s; taken as no record\n"
                     % (path, why))
    sys.stderr.flush()
    return []


def _parse(value, base):
    version = value.get("version")
    if not _is_int(version):
        raise _Garbage("no integer \"version\"")
    if version != VERSION:
        raise _Garbage("version %d, expected %d" % (version, VERSION))
    raw = value.get("entries")
    if not isinstance(raw, list):
        raise _Garbage("\"entries\" is not a list")
    return [_entry(i, e, base) for i, e in enumerate(raw)]


def _entry(i, e, base):
    def bad(field, expected):
        return _Garbage("entry %d: \"%s\" is %s, expected %s"
                        % (i, field, _messages._safe_repr(e.get(field) if isinstance(e, dict) else e, 40), expected))

    if not isinstance(e, dict):
        raise bad("", "an object")
    key, path = e.get("key"), e.get("path")
    if not isinstance(key, str) or not key:
        raise bad("key", "a non-empty string")
    if not isinstance(path, str) or not path or "\0" in path:
        raise bad("path", "a non-empty path")
    step = e.get("step")
    if step is not None and not (_is_int(step) and step >= 0):
        raise bad("step", "a step number or null")
    if not (_is_int(e.get("size")) and e["size"] >= 0):
        raise bad("size", "a number of bytes")
    if not _is_int(e.get("mtime_ns")):
        raise bad("mtime_ns", "nanoseconds since the epoch")
    t = e.get("time_unix")
    if not ((_is_int(t) or isinstance(t, float)) and math.isfinite(t)):
        raise bad("time_unix", "seconds since the epoch")
    if not (_is_int(e.get("attempt")) and e["attempt"] >= 0):
        raise bad("attempt", "an attempt number")
    verdict = e.get("verdict")
    if verdict is not None and not isinstance(verdict, str):
        raise bad("verdict", "a verdict name or null")
    return Entry(key, os.path.normpath(os.path.join(base, path)), step, e["size"], e["mtime_ns"], t,
                 e["attempt"], verdict, path)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def entries(key=None, record=None):
    """The entries of run key ``key`` (default :func:`run_key`), oldest first. ``record``: the
    entries :func:`read` returned (default: read now)."""
    key = run_key() if key is None else key
    record = read() if record is None else record
    return [e for e in record if e.key == key]


def newest_complete(dirpath, complete=None, key=None, record=None):
    """The newest entry of ``key`` whose checkpoint is directly in ``dirpath``, still has the
    recorded size and modification time, and passes ``complete(path)`` (the framework's own
    check; default: none), or None."""
    target = os.path.realpath(str(dirpath))
    for e in reversed(entries(key, record)):
        if os.path.realpath(os.path.dirname(e.path)) != target:
            continue
        if measure(e.path) != (e.size, e.mtime_ns):
            continue
        if complete is None or complete(e.path):
            return e
    return None


def claimed_by_others(key=None, record=None):
    """``{real path: key}`` of every checkpoint whose newest entry in the record belongs to
    another run key than ``key`` (default :func:`run_key`), changed since or not: a directory
    fallback must never resume from one of these."""
    key = run_key() if key is None else key
    record = read() if record is None else record
    newest = {}
    for e in record:  # oldest first: a later entry for the same path wins
        newest[os.path.realpath(e.path)] = e.key
    return {path: k for path, k in newest.items() if k != key}


def measure(path):
    """``(size, mtime_ns)`` of a checkpoint as the watchdog measures it, or None when it
    cannot be measured whole (missing, neither a regular file nor a directory, or a
    directory of more than 100,000 entries): a file's size, or for a directory the sum of the sizes of everything in it
    that is not a directory; and the newest modification time of it and of everything in
    it. Symbolic links inside a directory are not followed (their own size and time count);
    a ``path`` that is itself a link is measured through it, the link's own time counting
    too (pointed elsewhere: changed)."""
    try:
        link = os.lstat(path)
        top = os.stat(path) if _islink(link) else link
    except (OSError, ValueError):
        return None
    newest = max(link.st_mtime_ns, top.st_mtime_ns)
    if stat.S_ISREG(top.st_mode):
        return top.st_size, newest
    if not _isdir(top):
        return None
    size, dirs, seen = 0, [path], 0
    try:
        while dirs:
            with os.scandir(dirs.pop()) as it:
                for entry in it:
                    seen += 1
                    if seen > _MAX_WALK:
                        return None
                    st = entry.stat(follow_symlinks=False)
                    newest = max(newest, st.st_mtime_ns)
                    if _isdir(st):
                        dirs.append(entry.path)
                    else:
                        size += st.st_size
    except OSError:
        return None
    return size, newest


def _islink(st):
    return stat.S_ISLNK(st.st_mode)


def _isdir(st):
    return stat.S_ISDIR(st.st_mode)
