"""The binary's units as the client reads them: signal names and numbers, durations.

The parsers here agree with ``crates/watchdog-types/src/units.rs`` (``parse_signal``,
``parse_duration``) on every case of ``tests/cases/units.json``, which both sides test
against; they also say whether a signal may be the checkpoint signal, and write a number of
seconds as the binary's flags take it. Sizes are never parsed here: ``attach()`` passes a
size's text to the binary, which checks it.
"""

import os
import re
import signal

from training_watchdog import _defaults


# What Rust's str::trim takes away (the Unicode White_Space characters); str.strip() also takes
# U+001C..U+001F, which the binary keeps (and so refuses).
_WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_DIGITS = "0123456789"

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

    Names with or without ``SIG``, in any case of their ASCII letters: ``SIGUSR1``, ``usr1``,
    and the real-time ``SIGRTMIN``, ``SIGRTMIN+n``, ``SIGRTMAX-n``, ``SIGRTMAX`` (computed from
    ``signal.SIGRTMIN``/``signal.SIGRTMAX``, as the binary does at run time). Raises
    ValueError for anything else, or a real-time offset outside SIGRTMIN..SIGRTMAX. Whether
    the number may be the checkpoint signal is :func:`_checkpoint_signal`'s question.
    """
    if sig is None:
        sig = os.environ.get("WATCHDOG_SIGNAL") or _defaults.SIGNAL
    if isinstance(sig, int) and not isinstance(sig, bool):
        return int(sig)
    # The binary's trim and upper-casing: only ASCII letters change case ("\u017fIG" is no "SIG").
    text = "".join(c.upper() if c.isascii() else c for c in sig.strip(_WHITE_SPACE)) if isinstance(sig, str) else ""
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


# The binary's duration units (parse_duration in crates/watchdog-types/src/units.rs).
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0,
                   "m": 60.0, "min": 60.0, "mins": 60.0, "h": 3600.0, "hr": 3600.0, "hrs": 3600.0,
                   "d": 86400.0}
# A number as Rust's f64 parser takes one made of digits and dots only: "5", "5.", ".5", "1.5".
_DURATION_NUMBER = re.compile(r"[0-9]+\.?[0-9]*|\.[0-9]+")
# The binary's largest duration, in seconds.
_MAX_DURATION_S = 1e12


def _duration_seconds(text):
    """Seconds of a duration such as ``"20ms"``, ``"1.5s"``, ``"1h 30m"`` or ``"0"``; None where
    the binary's ``parse_duration`` refuses it (tests/cases/units.json holds the cases).

    Parts of a number (digits and at most one dot) and a unit, summed; white space around the
    text and around a unit is ignored; a bare ``0`` needs no unit; at most 10^12 s."""
    rest = str(text).strip(_WHITE_SPACE)
    if rest == "0":
        return 0.0
    if not rest:
        return None
    total = 0.0
    while rest:
        end = next((i for i, c in enumerate(rest) if c not in _DIGITS and c != "."), None)
        if end is None or not _DURATION_NUMBER.fullmatch(rest[:end]):
            return None
        number, rest = float(rest[:end]), rest[end:]
        end = next((i for i, c in enumerate(rest) if c in _DIGITS or c == "."), len(rest))
        scale = _DURATION_UNITS.get(rest[:end].strip(_WHITE_SPACE))
        if scale is None:
            return None
        total += number * scale
        rest = rest[end:]
    if total != total or total > _MAX_DURATION_S:  # NaN cannot come, but inf can
        return None
    return total


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
