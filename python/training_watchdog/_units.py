"""The binary's units as the client reads them: signal names and numbers, durations.

The parsers here follow ``crates/watchdog-types/src/units.rs`` (``parse_signal``,
``parse_duration``); they also say whether a signal may be the checkpoint signal, and write a
number of seconds as the binary's flags take it. Sizes are never parsed here: ``attach()`` passes a
size's text to the binary, which checks it.
"""

import os
import re
import signal

from training_watchdog import _defaults


# The standard signals the binary knows by name (crates/watchdog-types/src/units.rs, SIGNALS);
# it also reads IOT as ABRT. Aliases Python knows beyond these (CLD, POLL) are refused, as there.
_SIGNAL_NAMES = tuple(
    "HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT CHLD CONT STOP "
    "TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS".split()
)

# Signals whose handlers are crash or abort paths; the binary refuses them as the checkpoint
# signal (CRASH_SIGNALS there).
_CRASH_SIGNALS = frozenset(
    "SIG" + n for n in "SEGV BUS FPE ILL ABRT TRAP SYS QUIT XCPU XFSZ".split()
)

_RT_NAME = re.compile(r"RTM(IN|AX)(?:([+-])([0-9]+))?")

_SIGNAL_EXPECTED = "expected e.g. SIGUSR1, USR2, 10 or SIGRTMIN+2"


def _resolve_signal(sig=None):
    """Signal number from an int, a numeric string or a name, as the watchdog writes them.

    Names with or without ``SIG``, any case: ``SIGUSR1``, ``USR1``, and the real-time
    ``SIGRTMIN``, ``SIGRTMIN+n``, ``SIGRTMAX-n``, ``SIGRTMAX`` (computed from
    ``signal.SIGRTMIN``/``signal.SIGRTMAX``, as the binary does at run time). Raises
    ValueError for anything else, or a real-time offset outside SIGRTMIN..SIGRTMAX. Whether
    the number may be the checkpoint signal is :func:`_checkpoint_signal`'s question.
    """
    if sig is None:
        sig = os.environ.get("WATCHDOG_SIGNAL") or _defaults.SIGNAL
    if isinstance(sig, int) and not isinstance(sig, bool):
        return int(sig)
    text = str(sig).strip().upper() if isinstance(sig, str) else ""
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    name = text[3:] if text.startswith("SIG") else text
    name = "ABRT" if name == "IOT" else name
    rt = _RT_NAME.fullmatch(name)
    if rt and hasattr(signal, "SIGRTMIN"):
        lo, hi = int(signal.SIGRTMIN), int(signal.SIGRTMAX)
        which, sign, offset = rt.groups()
        if sign is None:
            return lo if which == "IN" else hi
        if (which, sign) == ("IN", "+"):
            num = lo + int(offset)
        elif (which, sign) == ("AX", "-"):
            num = hi - int(offset)
        else:
            num = None
        if num is not None and lo <= num <= hi:
            return num
    elif name in _SIGNAL_NAMES:
        member = signal.Signals.__members__.get("SIG" + name)
        if member is not None:
            return int(member)
    raise ValueError(
        "unknown signal: expected a name like SIGUSR1 or USR1, SIGRTMIN+n or SIGRTMAX-n, or a number"
    )


def _signal_problem(signum, for_attach=False):
    """Why ``signum`` cannot be the checkpoint signal, or None when it can.

    The binary's rule (``parse_signal``): a standard signal but KILL and STOP, or one in
    SIGRTMIN..SIGRTMAX (not the numbers the C library keeps for itself below SIGRTMIN), and
    not a crash signal. :func:`attach` also refuses SIGINT, which Jupyter interrupts with.
    """
    name = _signal_name(signum)
    standard = name[3:] in _SIGNAL_NAMES
    realtime = hasattr(signal, "SIGRTMIN") and int(signal.SIGRTMIN) <= signum <= int(signal.SIGRTMAX)
    if name in ("SIGKILL", "SIGSTOP"):
        return "%s cannot be caught, so no process could be asked to checkpoint with it" % name
    if not (standard or realtime) or signum not in signal.valid_signals():
        lo, hi = int(getattr(signal, "SIGRTMIN", 0)), int(getattr(signal, "SIGRTMAX", 0))
        return "%d is not a signal a process can catch (here: 1-31 but KILL and STOP, and %d-%d)" % (
            signum, lo, hi)
    if name in _CRASH_SIGNALS:
        return "%s is a crash signal (faulthandler and C runtimes end the process on it)" % name
    if for_attach and name == "SIGINT":
        return "Jupyter interrupts the running cell with it"
    return None


def _checkpoint_signal(sig=None, for_attach=False):
    """(number, name) of the checkpoint signal ``sig`` (None: ``$WATCHDOG_SIGNAL``, else SIGUSR1).

    The one check for :func:`install`, :func:`attach` and ``WATCHDOG_SIGNAL``; it accepts
    what the binary accepts. A ValueError names where the bad value came from
    (``sig=...`` or ``WATCHDOG_SIGNAL=...``), why it cannot be used, and what is expected.
    """
    source = "sig=%r" % (sig,)
    if sig is None:
        env = os.environ.get("WATCHDOG_SIGNAL")
        source = "WATCHDOG_SIGNAL=%r" % env if env else "the default %s" % _defaults.SIGNAL
    try:
        signum = _resolve_signal(sig)
    except ValueError as e:
        raise ValueError("%s: %s" % (source, e)) from None
    why = _signal_problem(signum, for_attach)
    if why is not None:
        raise ValueError("%s cannot be the checkpoint signal: %s; %s" % (source, why, _SIGNAL_EXPECTED))
    return signum, _signal_name(signum)


def _signal_name(signum):
    """The name the watchdog gives a signal number: ``SIGUSR1``, ``SIGRTMIN``, ``SIGRTMIN+2``."""
    lo = int(getattr(signal, "SIGRTMIN", 0)) or None
    if lo is not None and lo < signum <= int(signal.SIGRTMAX):
        return "SIGRTMIN+%d" % (signum - lo)
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?)(ns|us|µs|ms|secs|sec|s|mins|min|m|hrs|hr|h|d)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0,
                   "m": 60.0, "min": 60.0, "mins": 60.0, "h": 3600.0, "hr": 3600.0, "hrs": 3600.0,
                   "d": 86400.0}


def _duration_seconds(text):
    """Seconds of a duration such as ``"20ms"``, ``"1.5s"`` or ``"1m30s"``; None otherwise."""
    text = str(text).strip()
    if text == "0":
        return 0.0
    if not text or _DURATION_PART.sub("", text):
        return None
    return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))


def _seconds_text(name, value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif hasattr(value, "total_seconds"):  # datetime.timedelta
        seconds = value.total_seconds()
    else:
        raise TypeError(
            "%s=%r: expected a number of seconds, a datetime.timedelta or a duration string "
            "such as '60s' or '1h30m'" % (name, value)
        )
    text = ("%.6f" % seconds).rstrip("0").rstrip(".")
    if seconds < 0 or seconds != seconds or (seconds > 0 and text == "0"):
        raise ValueError("%s=%r: expected a duration of 1 µs or more, or 0" % (name, value))
    return text + "s"
