"""Files a run, a user or a crashed attempt could have planted, read and written safely.

Reading: never through a symbolic link (unless asked), never blocking on a FIFO, a regular
file by ``fstat`` of what was opened, at most a size cap, as the daemon reads a user's file.
Writing: a temp file in the same directory, then a rename, so a reader never sees half a file.
Used for the request, ack and environment files, the checkpoint record and a checkpoint's
own files (``trainer_state.json``, a ``.ckpt``'s zip directory).
"""

import errno
import json
import os
import stat
import time

from training_watchdog import _defaults

# The most read of a request or ack file (64 KiB, the daemon's cap).
_MAX_FILE_BYTES = _defaults.MAX_FILE_BYTES
# As the daemon opens them: never through a symbolic link, never blocking on a FIFO, never
# adopting a terminal.
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))


class _Unfit(Exception):
    """A request or ack file that is not read: why, for the warning."""


def _open_regular(path, follow=False):
    """``(fd, stat)`` of ``path`` opened for reading as the daemon opens a user's file, or None when
    it is missing: ``O_NONBLOCK`` (a FIFO never blocks the open), ``O_NOFOLLOW`` unless
    ``follow`` (a checkpoint the user named through a link is read through it; a file inside
    one never is), and a regular file by ``fstat`` of what was opened (no race with a swap).
    Raises :class:`_Unfit` otherwise. Every file a run, a user or a crashed attempt could
    have planted is opened here (request, ack, checkpoint record, ``trainer_state.json``, a
    checkpoint's zip)."""
    flags = _READ_FLAGS if not follow else _READ_FLAGS & ~getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _Unfit("it is a symbolic link") from None
        raise _Unfit(e.strerror or str(e)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Unfit("not a regular file")
    except BaseException as e:
        os.close(fd)
        if isinstance(e, OSError):
            raise _Unfit(e.strerror or str(e)) from None
        raise
    return fd, st


def _read_capped(path, limit=_MAX_FILE_BYTES, owner=None, follow=False):
    """The bytes of ``path`` (None when it is missing), read as the daemon reads a user's file:
    opened by :func:`_open_regular`, at most ``limit`` bytes (64 KiB), owned by uid ``owner``
    when given. Raises :class:`_Unfit` otherwise."""
    opened = _open_regular(path, follow)
    if opened is None:
        return None
    fd, st = opened
    try:
        if owner is not None and st.st_uid != owner:
            raise _Unfit("owned by uid %d, not by this user (uid %d)" % (st.st_uid, owner))
        if st.st_size > limit:
            raise _Unfit("%d bytes, more than the %d read" % (st.st_size, limit))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew since the fstat
            raise _Unfit("more than the %d bytes read" % limit)
        return b"".join(chunks)
    except OSError as e:
        raise _Unfit(e.strerror or str(e)) from None
    finally:
        os.close(fd)


def _parse_object(data):
    """The JSON object in ``data``; :class:`_Unfit` for anything else."""
    try:
        value = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise _Unfit("JSON nested too deeply") from None
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError both are
        raise _Unfit("not a JSON object (%s)" % e) from None
    if not isinstance(value, dict):
        raise _Unfit("not a JSON object")
    return value


def _write_atomic(path, data, sync=True):
    """Write bytes to ``path`` via a temp file (O_EXCL|O_NOFOLLOW) in the same directory, fsync, rename.

    ``sync=False`` skips the fsync, for a file the watchdog reads within an interval and that
    is worth nothing after a crash (the step reports)."""
    if os.path.islink(path):
        raise OSError("refusing to write %s: it is a symbolic link" % path)
    directory = os.path.dirname(path) or "."
    base = os.path.basename(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for attempt in range(100):
        tmp = os.path.join(directory, ".%s.tmp.%d.%d.%d" % (base, os.getpid(), time.monotonic_ns(), attempt))
        try:
            fd = os.open(tmp, flags, 0o644)
            break
        except FileExistsError:
            continue
    else:
        raise OSError("cannot create a temp file next to %s" % path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
