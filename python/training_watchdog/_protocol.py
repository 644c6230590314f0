"""The words of the request and ack files that several modules read.

A number field, what a notice request is (a SIGTERM or a preemption, not a resource running
out), the ack file's path, and :data:`TERM_CAUSE`. The files themselves are read and written
by :mod:`training_watchdog._requests`.
"""

#: The ``cause`` of an acknowledgment written for a SIGTERM this process caught itself
#: (and the ``reason`` of the watchdog's own SIGTERM notice).
TERM_CAUSE = "terminating"


def _number(d, key):
    v = d.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _seq(d):
    """The ``seq`` of a request or an ack as the watchdog writes it (an unsigned 64-bit
    integer), else None: 1e999, -5 or 1.5 is no request, and is never written back."""
    v = _number(d, "seq")
    if isinstance(v, float):
        v = int(v) if v.is_integer() else None
    return v if v is not None and 0 <= v < 2**64 else None


def _is_notice(req):
    return req.get("kind") == "notice" or req.get("resource") == "notice"


def _is_term_notice(req):
    """The watchdog's notice of a SIGTERM it got (it forwards SIGTERM once the save is acknowledged)."""
    return _is_notice(req) and req.get("reason") == TERM_CAUSE


def _ack_path(path):
    return path + ".ack"
