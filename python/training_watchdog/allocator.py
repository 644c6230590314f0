"""The allocator's figures per step, written beside the request file for the watchdog.

A CUDA out-of-memory error is decided by the peak inside one step, which the device total
that NVML reports cannot show. PyTorch's caching allocator knows it: this module reads
``torch.cuda.memory_stats()`` for the process's current device at the end of each step and
writes what it read to ``<request file>.steps``, or ``<request file>.steps.<pid>`` when the
process is one of several ranks (``WORLD_SIZE`` above 1: they share the request file)
(format: docs/recording.md, "The step reports")::

    import training_watchdog as tw
    for step, batch in enumerate(loader):
        train_step(batch)
        tw.report_step(step)               # phase="train"; batch_size=, tokens= when known

The framework callbacks call :func:`report_step` themselves. By default the peak is reset
after each read (``torch.cuda.reset_peak_memory_stats``), so each entry's ``peak`` is the
peak during that step; the reset is process-wide and changes what
``torch.cuda.max_memory_allocated()`` returns to anyone else: ``reset_peak=False`` keeps it
(docs/frameworks.md, "Step reports").

Standard library only, and torch is never imported here: the torch the process already
imported is used, and nothing is reported while it is absent or CUDA is not initialized.
Nothing here raises into the training loop: a failure is one ``RuntimeWarning``, and the
reports stop or go on as they can.
"""

import json
import os
import re
import sys
import threading
import time

from training_watchdog import _files, _messages, _service, _units

__all__ = ["report_step", "report_exception", "flush"]

#: The most entries one file carries; older ones are folded (docs/recording.md).
MAX_ENTRIES = 256
#: The watchdog's cap on the file.
MAX_FILE_BYTES = 128 * 1024
#: The most characters of an exception's message written.
MAX_MESSAGE = 1000
#: How often the file is written without ``WATCHDOG_INTERVAL``, in seconds.
DEFAULT_INTERVAL_S = 0.1
#: The longest wait between two writes while the file stays unread (nobody reads it: an
#: older watchdog, or one that stopped), in seconds; the interval itself when it is longer.
MAX_BACKOFF_S = 5.0

PHASES = ("train", "eval", "other")

# The figures of an entry, and the memory_stats() keys they come from.
_STATS = (
    ("allocated", "allocated_bytes.all.current"),
    ("reserved", "reserved_bytes.all.current"),
    ("peak", "allocated_bytes.all.peak"),
    ("retries", "num_alloc_retries"),
    ("ooms", "num_ooms"),
)
# Folded as their maximum.
_FOLD_MAX = ("allocated", "reserved", "peak", "retries", "ooms", "duration_s", "batch_size", "tokens")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class _Entry(dict):
    """One step's entry; ``text`` caches its JSON, so that a file rewritten while unread
    serializes only its new entries."""

    __slots__ = ("text",)


_COMPACT = (",", ":")


def _text(entry):
    text = getattr(entry, "text", None)
    if text is None:
        text = json.dumps(entry, separators=_COMPACT)
        if isinstance(entry, _Entry):
            entry.text = text
    return text


class _State:
    """What this process reported and has not seen read yet."""

    def __init__(self):
        self.pid = os.getpid()
        self.n = 0
        # phase -> pass number; the phase of the last report; phase -> monotonic time of its last report
        self.passes = {}
        # phase -> its reports so far (each entry's ``phase_n``)
        self.phase_n = {}
        self.last_phase = None
        self.last_time = {}
        # Entries written to the file the watchdog has not read yet, and entries not written yet.
        self.unread = []
        self.pending = []
        self.exception = None  # the exception object, until a write of it is read
        self.exception_written = False
        self.last_write = None  # monotonic time of the last write
        self.backoff = 1  # intervals between two writes: doubled each time the last one is still unread
        self.path = None  # the file last written
        self.device = None  # (index, {"index": i, "uuid": ...})
        self.interval = (None, DEFAULT_INTERVAL_S)  # (WATCHDOG_INTERVAL's text, seconds)


_state = _State()
_lock = threading.RLock()
_warned = set()
_atexit = False


def _warn(what, error):
    """One RuntimeWarning per kind of failure, never raised (even under ``-W error``)."""
    if what in _warned:
        return
    _warned.add(what)
    try:
        import warnings

        warnings.warn("training_watchdog: %s: %s; step reports go on without it" % (what, error),
                      RuntimeWarning, stacklevel=_messages._caller_stacklevel())
    except Exception:
        pass


def _cuda():
    """``torch.cuda`` when torch is imported and CUDA is initialized in this process, else None."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None:
        return None
    try:
        return cuda if cuda.is_initialized() else None
    except Exception:
        return None


def _uuid_text(uuid):
    """A device UUID as NVML spells it (``GPU-xxxxxxxx-...``), or None."""
    if uuid is None:
        return None
    text = str(uuid).strip()
    if text.startswith(("GPU-", "MIG-")):
        return text[:64]
    if _UUID.match(text):
        return "GPU-" + text.lower()
    raw = getattr(uuid, "bytes", None)
    if isinstance(raw, (bytes, bytearray)) and len(raw) == 16:
        h = bytes(raw).hex()
        return "GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])
    return None


def _device(cuda):
    """``{"index": i, "uuid": ...}`` of the current device (the UUID looked up once per index)."""
    index = int(cuda.current_device())
    if _state.device is None or _state.device[0] != index:
        device = {"index": index}
        try:
            uuid = _uuid_text(getattr(cuda.get_device_properties(index), "uuid", None))
        except Exception:
            uuid = None
        if uuid:
            device["uuid"] = uuid
        _state.device = (index, device)
    return index, _state.device[1]


def _figures(cuda, index):
    """The allocator's figures for device ``index``: ``{"allocated": ..., ...}``."""
    stats = cuda.memory_stats(index)
    out = {}
    for name, key in _STATS:
        value = stats.get(key, 0)
        out[name] = int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0
    return out


#: The largest count the watchdog reads (a u64): one past it would make it refuse the whole file.
MAX_COUNT = (1 << 64) - 1


def _count(name, value):
    """A whole number from 0 to 2**64 - 1, as a plain ``int`` (None stays None); anything else,
    whatever its ``__int__``, ``__index__``, ``__eq__`` or ``__repr__`` does, is a ValueError
    naming it."""
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            as_int = None
        elif isinstance(value, int):
            as_int = int.__int__(value)  # a plain int, whatever an int subclass overrides
        else:
            as_int = int.__int__(int(value))
            if not bool(as_int == value):  # 1.5 is not a step; 3.0 and a 0-d tensor of 3 are
                as_int = None
    except Exception:
        as_int = None
    if as_int is None:
        raise ValueError("%s=%s: expected a whole number" % (name, _messages._safe_repr(value)))
    if not 0 <= as_int <= MAX_COUNT:
        raise ValueError("%s=%s: expected 0 to 2**64 - 1" % (name, _messages._safe_repr(value)))
    return as_int


def _phase(phase):
    """``phase`` as one of :data:`PHASES` (a plain ``str``); a ValueError naming it otherwise."""
    try:
        if isinstance(phase, str):
            text = str.__str__(phase)
            if text in PHASES:
                return text
    except Exception:
        pass
    raise ValueError("phase=%s: expected one of %s" % (_messages._safe_repr(phase), ", ".join(PHASES)))


def _arguments(step, phase, batch_size, tokens, reset_peak):
    """The arguments of :func:`report_step` as plain values; a ValueError naming the first bad one."""
    if step is None:
        raise ValueError("step=None: expected a whole number")
    step = _count("step", step)
    phase = _phase(phase)
    batch_size = _count("batch_size", batch_size)
    tokens = _count("tokens", tokens)
    try:
        reset_peak = bool(reset_peak)
    except Exception:
        raise ValueError("reset_peak=%s: expected True or False" % _messages._safe_repr(reset_peak)) from None
    return step, phase, batch_size, tokens, reset_peak


def _interval():
    """Seconds between two writes: ``WATCHDOG_INTERVAL`` (seconds), else 0.1."""
    text = os.environ.get("WATCHDOG_INTERVAL")
    if text != _state.interval[0]:
        seconds = DEFAULT_INTERVAL_S
        if text:
            try:
                value = float(text)
            except ValueError:
                value = _units._duration_seconds(text)  # "100ms", as the binary's flag takes it
            if value is not None and 0 <= value < float("inf"):
                seconds = value
            else:
                _warn("WATCHDOG_INTERVAL=%r is not a number of seconds" % text, "using %g s" % seconds)
        _state.interval = (text, seconds)
    return _state.interval[1]


def _wait():
    """Seconds from one write to the next: the interval, doubled for each write in a row that
    found the last one unread (up to :data:`MAX_BACKOFF_S`): rewriting 256 entries ten times a
    second for nobody costs a few percent of a 50 ms step."""
    interval = _interval()
    if _state.backoff == 1:
        return interval
    return min(interval * _state.backoff, max(interval, MAX_BACKOFF_S))


def _fold(entries, cap=MAX_ENTRIES):
    """``entries`` (oldest first) in at most ``cap``: the oldest folded into one per phase (the
    maximum of each figure, the last ``n``, ``step``, ``pass``, ``phase_n`` and time; ``folded``
    adds up)."""
    if len(entries) <= cap:
        return entries
    cut = len(entries) - cap + 1
    while True:
        merged = {}
        for e in entries[:cut]:
            m = merged.get(e["phase"])
            if m is None:
                merged[e["phase"]] = _Entry(e)
                continue
            for key in _FOLD_MAX:
                if key in e:
                    m[key] = max(m[key], e[key]) if key in m else e[key]
            for key in ("n", "step", "pass", "time_unix", "phase_n"):
                if key in e:
                    m[key] = e[key]
            m["folded"] = m.get("folded", 1) + e.get("folded", 1)
        if len(merged) + len(entries) - cut <= cap or cut >= len(entries):
            return sorted(merged.values(), key=lambda m: m["n"]) + entries[cut:]
        cut += 1


def _body(entries):
    """The file's bytes: ``{"pid", "device", "steps", "exception"}`` (each entry's JSON cached)."""
    parts = ['{"pid":%d' % os.getpid()]
    if _state.device is not None:
        parts.append(',"device":' + json.dumps(_state.device[1], separators=_COMPACT))
    parts.append(',"steps":[' + ",".join([_text(e) for e in entries]) + "]")
    if _state.exception is not None:
        parts.append(',"exception":' + json.dumps(_state.exception, separators=_COMPACT))
    parts.append("}\n")
    return "".join(parts).encode("utf-8")


def _several_ranks():
    """Whether this process is one of several ranks (torchrun, torch.distributed and Lightning
    set ``WORLD_SIZE``), which share the request file and so each need a file of their own."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def _suffix():
    """``.steps``, or ``.steps.<pid>`` for one of several ranks: one shared file would be
    replaced by each rank's write, and a rank would drop its entries when another's was read."""
    return ".steps.%d" % os.getpid() if _several_ranks() else ".steps"


def _write(now):
    """Write every entry the watchdog has not read (and an exception) to ``<request file>`` and
    :func:`_suffix`."""
    _state.last_write = now
    path = _service._request_file_or_register()
    if not path:
        return False  # no watchdog yet: the entries wait (folded) for one
    path += _suffix()
    if path == _state.path and os.path.lexists(path):
        _state.backoff = min(_state.backoff * 2, 1 << 20)
    else:
        # Read (and removed) by the watchdog, or a new file: the old entries are its already.
        _state.backoff = 1
        _state.unread = []
        if _state.exception_written and path == _state.path:
            _state.exception = None
            _state.exception_written = False
    entries = _fold(_state.unread + _state.pending)
    data = _body(entries)
    cap = MAX_ENTRIES
    while len(data) > MAX_FILE_BYTES and cap > 8:
        cap //= 2
        entries = _fold(entries, cap)
        data = _body(entries)
    _files._write_atomic(path, data, sync=False)
    _state.path = path
    _state.unread = entries
    _state.pending = []
    _state.exception_written = _state.exception is not None
    return True


def _forked():
    """After a fork: the child starts its own count (the parent's entries are the parent's)."""
    global _state
    if _state.pid != os.getpid():
        _state = _State()


def report_step(step, phase="train", batch_size=None, tokens=None, reset_peak=True):
    """Record the allocator's figures at the end of one step; write them at most once per interval.

    ``step``: the global step in training, the batch index in an evaluation. ``phase``:
    ``"train"``, ``"eval"`` or ``"other"``; each switch into a phase starts a new pass of it.
    ``batch_size``, ``tokens``: when known (the watchdog relates peaks to them).
    ``reset_peak``: reset the allocator's peak after reading it, so that the next entry's
    peak is that step's own (process-wide: ``torch.cuda.max_memory_allocated()`` then
    returns the peak since the last step to everyone; pass False when your code or a
    library reads it). Returns True when an entry was recorded: False without torch, or
    before CUDA is initialized. Never raises into the loop, whatever it is given (an object
    whose ``__int__``, ``__index__``, ``__eq__``, ``__str__`` or ``__bool__`` raises
    included): a bad argument is False, and the first one a ``RuntimeWarning``; a failure
    is False, and one ``RuntimeWarning`` per kind of failure.
    """
    try:
        step, phase, batch_size, tokens, reset_peak = _arguments(step, phase, batch_size, tokens, reset_peak)
    except ValueError as e:
        _warn("report_step() was given a bad argument", e)
        return False
    cuda = _cuda()
    if cuda is None:
        return False
    try:
        with _lock:
            _forked()
            index, _ = _device(cuda)
            figures = _figures(cuda, index)
            if reset_peak:
                cuda.reset_peak_memory_stats(index)
            now = time.monotonic()
            _record(step, phase, batch_size, tokens, figures, now)
            if _state.last_write is None or now - _state.last_write >= _wait():
                _write(now)
        return True
    except Exception as e:
        _warn("cannot report the allocator's figures", _messages._failure(e))
        return False


def _record(step, phase, batch_size, tokens, figures, now):
    s = _state
    s.n += 1
    new_pass = s.last_phase != phase
    if new_pass:
        s.passes[phase] = s.passes.get(phase, 0) + 1
    s.phase_n[phase] = s.phase_n.get(phase, 0) + 1
    entry = _Entry((("n", s.n), ("step", step), ("phase", phase), ("pass", s.passes[phase]),
                    ("phase_n", s.phase_n[phase]), ("time_unix", round(time.time(), 6))))
    last = s.last_time.get(phase)
    if last is not None and not new_pass:
        entry["duration_s"] = round(now - last, 6)
    entry.update(figures)
    if batch_size is not None:
        entry["batch_size"] = batch_size
    if tokens is not None:
        entry["tokens"] = tokens
    entry["folded"] = 1
    s.last_phase = phase
    s.last_time[phase] = now
    s.pending.append(entry)
    if len(s.pending) > MAX_ENTRIES:
        # to three quarters, so that a run with nobody to read folds once per 64 steps
        s.pending = _fold(s.pending, MAX_ENTRIES * 3 // 4)
    _register_flush()


def _is_cuda_oom(exc):
    torch = sys.modules.get("torch")
    for owner in (torch, getattr(torch, "cuda", None)):
        kind = getattr(owner, "OutOfMemoryError", None)
        if isinstance(kind, type) and isinstance(exc, kind):
            return True
    return "out of memory" in _messages._message(exc).lower()


def report_exception(exc, step=None, phase=None):
    """Write at once that a CUDA out-of-memory error ended a step: its message and the figures then.

    ``exc``: the exception (anything but a CUDA out-of-memory error is not written).
    ``step``, ``phase``: the step it was raised in, when known. The file also carries the
    entries not yet read. Returns True when written; never raises.
    """
    try:
        if not _is_cuda_oom(exc):
            return False
        with _lock:
            _forked()
            record = {"kind": "cuda_oom"}
            try:  # a step or phase that is not one: the error is reported without it
                if step is not None:
                    record["step"] = _count("step", step)
            except ValueError:
                pass
            try:
                if phase is not None:
                    record["phase"] = _phase(phase)
            except ValueError:
                pass
            record["time_unix"] = round(time.time(), 6)
            # As UTF-8 the watchdog can read: a lone surrogate would make it refuse the file.
            record["message"] = _messages._message(exc)[:MAX_MESSAGE].encode("utf-8", "replace").decode("utf-8")
            cuda = _cuda()
            if cuda is not None:
                try:
                    index, _ = _device(cuda)
                    figures = _figures(cuda, index)
                    record.update((k, figures[k]) for k in ("allocated", "reserved", "peak"))
                except Exception as e:
                    _warn("cannot read the allocator's figures for the exception", e)
            _state.exception = record
            _state.exception_written = False
            return _write(time.monotonic())
    except Exception as e:
        _warn("cannot report the CUDA out-of-memory error", _messages._failure(e))
        return False


def flush():
    """Write the entries not written yet now, whatever the interval (at exit, at the end of training)."""
    try:
        with _lock:
            _forked()
            if _state.pending:
                _write(time.monotonic())
    except Exception as e:
        _warn("cannot write the step reports", _messages._failure(e))


def _register_flush():
    global _atexit
    if not _atexit:
        import atexit

        atexit.register(flush)
        _atexit = True


def _reset():
    """Forget every report (for tests)."""
    global _state
    with _lock:
        _state = _State()
        _warned.clear()


def batch_shape(batch):
    """``(batch_size, tokens)`` of a batch, as far as it shows them (None where it does not).

    A tensor: its first dimension. A mapping with ``input_ids``: its first dimension and its
    number of elements (padding included: it takes memory too). A list or tuple: its first
    tensor's. Reads shapes only.
    """
    try:
        if isinstance(batch, dict):
            ids = batch.get("input_ids")
            if ids is not None and hasattr(ids, "shape") and len(ids.shape) >= 1:
                return int(ids.shape[0]), int(ids.numel())
            batch = next((v for v in batch.values() if hasattr(v, "shape")), None)
        elif isinstance(batch, (list, tuple)):
            batch = next((v for v in batch if hasattr(v, "shape")), None)
        shape = getattr(batch, "shape", None)
        if shape is not None and len(shape) >= 1:
            return int(shape[0]), None
    except Exception:
        pass
    return None, None
