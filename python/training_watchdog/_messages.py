"""Text about a caller's objects that never raises, and where a warning points.

A bad argument or an exception is quoted in a message whatever its ``__repr__`` or
``__str__`` does; a warning names the first caller outside this package.
"""

import sys

# The package whose frames a warning skips (``training_watchdog``).
_PACKAGE = __name__.rpartition(".")[0]


def _safe_repr(value, limit=80):
    """``repr(value)`` in at most ``limit`` characters, for a message about a bad argument: never
    raises, whatever the object's ``__repr__`` does (then ``<unprintable TYPE>``)."""
    try:
        text = repr(value)
        if not isinstance(text, str):
            raise TypeError
        text = str.__str__(text)
    except Exception:
        text = "<unprintable %s>" % _type_name(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _message(exc):
    """The text of an exception for a log line: ``str(exc)``, or ``<unprintable TYPE>`` when its
    ``__str__`` raises; never raises."""
    try:
        text = str(exc)
        if isinstance(text, str):
            return str.__str__(text)
    except Exception:
        pass
    return "<unprintable %s>" % _type_name(exc)


def _failure(exc):
    """``TYPE: message`` of an exception, for a log line or a warning; never raises."""
    return "%s: %s" % (_type_name(exc), _message(exc))


def _type_name(value):
    """The name of ``value``'s type; ``object`` when even that cannot be read."""
    try:
        return str.__str__(type.__getattribute__(type(value), "__name__"))
    except Exception:
        return "object"


def _caller_stacklevel():
    """The ``stacklevel`` that makes a warning point at the first caller outside this package."""
    def inside(frame):
        name = frame.f_globals.get("__name__", "")
        return name == _PACKAGE or name.startswith(_PACKAGE + ".")

    level, frame = 1, sys._getframe(1)
    while frame is not None and inside(frame):
        level += 1
        frame = frame.f_back
    return level
