"""The request and acknowledgment files: :func:`checkpoint_requested`, :func:`acknowledge`.

A request is pending while no ack has its ``seq`` and a ``time_unix`` at or after the
request's; the files are read with the daemon's bounds (:mod:`training_watchdog._files`) and
parsed only when they change. The flag the signal handler sets, and a SIGTERM waiting for its
save, are asked of :mod:`training_watchdog._signals`.
"""

import json
import operator
import os
import re
import sys
import time

from training_watchdog import _process, _signals
from training_watchdog._display import _announce
from training_watchdog._files import _Unfit, _parse_object, _read_capped, _write_atomic
from training_watchdog._messages import _caller_stacklevel, _safe_repr
from training_watchdog._protocol import TERM_CAUSE, _ack_path, _is_term_notice, _number, _seq
from training_watchdog._service import _request_file_or_register, request_file


# A signal this soon after its request was written, arriving once that request is acknowledged,
# is that request's own signal come late (the watchdog writes the file, then signals).
_LATE_SIGNAL_S = 5.0
# the request being handled: what checkpoint_requested() saw when it returned True
_handling = None
# (seq, time_unix) of the last request this process acknowledged
_acked = None
# path -> ((ino, mtime_ns, size), parsed JSON or None): files are parsed only when they change
_cache = {}
# path -> why it was last refused: a bad file is warned about once, not at every step.
_refused = {}


def _warn_refused(path, why):
    """Warn once that ``path`` is not read (never raised, even under ``-W error``)."""
    if _refused.get(path) == why:
        return
    _refused[path] = why
    try:
        import warnings

        warnings.warn(
            "training_watchdog: not reading %s: %s; taken as no request or acknowledgment" % (path, why),
            RuntimeWarning,
            stacklevel=_caller_stacklevel(),
        )
    except Exception:
        pass


def _read_json_cached(path):
    """Parsed JSON object of ``path``, re-read only when its inode, mtime or size changed.

    Never raises and never blocks: a file that is not a regular file of at most 64 KiB
    holding a JSON object is warned about once and taken as None (missing: None, silently).
    """
    try:
        st = os.lstat(path)
    except OSError:
        _cache.pop(path, None)
        _refused.pop(path, None)
        return None
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    hit = _cache.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        data = _read_capped(path)
        if data is None:
            return None
        value = _parse_object(data)
    except _Unfit as e:
        _warn_refused(path, str(e))
        _cache[path] = (stamp, None)  # read again only once it changes
        return None
    _refused.pop(path, None)
    _cache[path] = (stamp, value)
    return value


def _file_request():
    """The parsed request file as a dict, or None."""
    path = request_file()
    if path is None:
        return None
    req = _read_json_cached(path)
    return dict(req) if req is not None else None


def request():
    """The current request as a dict, or None when there is none: the parsed request file;
    while a SIGTERM caught by ``install(on_term="save")`` waits for its save and the file
    holds no pending request, ``{"seq": 0, "kind": "notice", "resource": "notice",
    "reason": "terminating", "source": "sigterm", "time_unix": T, "used": 0, "limit": 0}``
    (no ``deadline_unix``: the grace of a SIGTERM sent to the run itself is not known here).
    A notice from the watchdog has ``kind`` ``notice`` and a ``deadline_unix``."""
    req = _file_request()
    if _signals._term_pending() and (req is None or not _pending(req)):
        return {"seq": 0, "kind": "notice", "resource": "notice", "reason": TERM_CAUSE,
                "source": "sigterm", "time_unix": _signals._term_at, "used": 0, "limit": 0}
    return req


def _pending(req):
    seq, t = _seq(req), _number(req, "time_unix") or 0.0
    if seq is None:
        return False
    if _acked is not None and _acked == (seq, t):
        return False
    path = request_file()
    ack = _read_json_cached(_ack_path(path)) if path else None
    if ack is not None and _seq(ack) == seq and (_number(ack, "time_unix") or 0.0) >= t:
        return False
    return True


def checkpoint_requested():
    """True when the signal arrived or the request file holds a request not yet acknowledged.

    Cheap enough for every step: one ``stat`` of the request file (and of the ack when a
    request exists); files are parsed only when they change. It never blocks or raises: a
    request or ack file that is not a regular file of at most 64 KiB holding a JSON object
    (a FIFO, ``/dev/zero``, a symbolic link) is one ``RuntimeWarning`` and no request.
    While a watchdog started by :func:`attach` runs, a new request is also shown once: an
    IPython display in a notebook (what runs out, how much is used, how long is left), else
    a :class:`CheckpointRequestWarning`. Under ``watchdog run`` the watchdog's own log says it.
    The watchdog writes the file before it signals, so a signal that arrives once its request
    is acknowledged (read from the file first, here or by another rank), within 5 s of the
    request, is that request's own and no new one.
    """
    global _handling
    req = _file_request()
    if req is not None and _pending(req):
        _handling = req
        if _process._attached is not None:
            _announce(req)
        return True
    if _signals._term_pending():
        return True
    if _signals._term_saved and _signals._term_flag:
        # SIGTERM came after its save (the watchdog's notice was acknowledged first): the
        # end, not a second save. A framework callback carries it out at its own point.
        if not _signals._term_deferred:
            _signals._end_by_sigterm()
        return False
    if _signals._flag:
        if req is not None:
            if _late_signal_of(req):
                _signals._clear_flag()
                return False
            _handling = req
        return True
    return False


def _late_signal_of(req):
    """Whether the flag was raised by the signal of ``req``, already acknowledged (read from its
    file before its signal arrived, by this process or another rank): no new request."""
    t = _number(req, "time_unix")
    return t is not None and 0.0 <= _signals._flag_at - t < _LATE_SIGNAL_S


def acknowledge(path=None, step=None, cause=None):
    """Tell the watchdog the checkpoint is saved: write ``<request file>.ack`` and clear the flag.

    Acknowledges the request seen by the last ``checkpoint_requested()`` that returned True
    (or the current one). ``path`` (the checkpoint written, a file or a directory; written
    absolute), ``step`` (the framework's global step it holds) and ``cause`` (why the client
    saved without a request: ``"cuda_oom"`` for the last-chance save) go into the ack when
    given; the fields are in docs/recording.md. An acknowledgment with a ``cause`` is written even when
    no request is pending, with ``seq`` 0 (the pending request's ``seq`` when there is one).
    Returns the acknowledged ``seq``, or None when nothing was written (no request file, or no
    request and no cause; the flag is cleared anyway). A failure to write the ack is reported
    with a warning, never raised into the training loop; a bad argument is a ValueError.

    After ``install(on_term="save")``, when the save answers a SIGTERM this process caught
    (``cause`` defaults to ``"terminating"`` unless a notice request of the watchdog's asks
    for it) or acknowledges such a notice, the process then ends as the SIGTERM would have
    ended it (see :func:`install`): with the default disposition this call does not return.
    """
    global _handling
    extra = _ack_fields(path, step, cause)
    _signals._clear_flag()
    req = _handling if _handling is not None else _file_request()
    _handling = None
    own_term = _signals._term_pending()
    notice = _signals._on_term is not None and req is not None and _is_term_notice(req) and _pending(req)
    if own_term and cause is None and not notice:
        cause = TERM_CAUSE
        extra["cause"] = cause
    try:
        return _write_ack(req, cause, extra)
    finally:
        if own_term or notice:
            _signals._term_answered()


def _write_ack(req, cause, extra):
    """Writes the ack of :func:`acknowledge`; returns its ``seq`` (None when none was written)."""
    global _acked
    if cause is not None and req is not None and not _pending(req):
        req = None  # a save nobody asked for: not an answer to a request handled before
    file = request_file() if cause is None else _request_file_or_register()
    seq = _seq(req) if req is not None else None
    if file is None or (seq is None and cause is None):
        return None
    if seq is None:
        seq = 0
    else:
        _acked = (seq, _number(req, "time_unix") or 0.0)
    body = json.dumps(dict({"seq": seq, "time_unix": time.time()}, **extra)).encode("utf-8") + b"\n"
    try:
        _write_atomic(_ack_path(file), body)
    except OSError as e:
        import warnings

        warnings.warn("training_watchdog: cannot write the acknowledgment: %s" % e, RuntimeWarning,
                      stacklevel=_caller_stacklevel())
    return seq


def _ack_fields(path, step, cause):
    """The optional fields of an ack, checked: ``path`` a path, ``step`` a whole number >= 0,
    ``cause`` a short name. A ValueError names the argument and what was expected, whatever
    the object does (its ``__fspath__``, ``__index__``, ``__eq__`` or ``__repr__`` raising
    included); what is kept is a plain ``str`` or ``int``, never the caller's object."""
    fields = {}
    if path is not None:
        try:
            raw = os.fspath(path)
            if isinstance(raw, bytes):
                text = bytes.decode(raw, sys.getfilesystemencoding(), "surrogateescape")
            else:
                text = str.__str__(raw)
            # Absolute: the watchdog, and a restarted run, may not share this process's directory.
            absolute = os.path.abspath(text)
        except Exception:
            raise ValueError("acknowledge(path=%s): expected a path (str or os.PathLike)" % _safe_repr(path)) from None
        try:
            absolute.encode("utf-8")
            fields["path"] = absolute
        except UnicodeEncodeError:
            pass  # not UTF-8: the watchdog could not read the ack at all; it goes without its path
    if step is not None:
        # At most 2**64 - 1: the watchdog reads it as a u64, and ignores an ack it cannot read.
        try:
            value = None if isinstance(step, bool) else int.__int__(operator.index(step))
        except Exception:
            value = None
        if value is None or not 0 <= value < 1 << 64:
            raise ValueError("acknowledge(step=%s): expected a whole number of steps, 0 to 2**64 - 1"
                             % _safe_repr(step))
        fields["step"] = value
    if cause is not None:
        try:
            name = str.__str__(cause) if isinstance(cause, str) else None
        except Exception:
            name = None
        if name is None or not re.fullmatch(r"[a-z0-9_]{1,64}", name):
            raise ValueError("acknowledge(cause=%s): expected a name such as 'cuda_oom'" % _safe_repr(cause))
        fields["cause"] = name
    return fields


def _reset_state():
    """Forget the request handled, the last ack and the files read (for tests)."""
    global _handling, _acked
    _handling = None
    _acked = None
    _cache.clear()
    _refused.clear()
