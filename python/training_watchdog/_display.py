"""What a person sees of an attached watchdog: a request shown in the notebook, the report.

A new request is shown once, as an IPython display in a notebook or else as a
:class:`CheckpointRequestWarning`; ``watchdog report`` draws a recording, inline in IPython.
IPython is never imported here unless the process already loaded it.
"""

import os
import subprocess
import sys
import time

from training_watchdog import _defaults
from training_watchdog._protocol import _is_notice, _number, _seq

# (seq, time_unix) of the last request shown in the notebook.
_shown = None


class CheckpointRequestWarning(UserWarning):
    """The warning shown (outside IPython) when an attached watchdog asks for a checkpoint."""


def _ipython():
    """The running IPython shell, or None (IPython is never imported here if it is not loaded)."""
    mod = sys.modules.get("IPython")
    get = getattr(mod, "get_ipython", None)
    try:
        return get() if get is not None else None
    except Exception:
        return None


def _html_inline(path):
    """An IPython HTML object showing the page at ``path`` in an iframe (its style stays inside)."""
    import html

    from IPython.display import HTML

    with open(path, "r", encoding="utf-8", errors="replace") as f:
        page = f.read()
    return HTML(
        '<div><iframe srcdoc="%s" style="width:100%%;height:720px;border:1px solid #ccc" '
        'title="watchdog report"></iframe></div>' % html.escape(page, quote=True)
    )


def _report(binary, recording, output):
    """Runs ``watchdog report``; returns an inline HTML object in IPython, else the page's path."""
    if output is None:
        name = os.path.basename(recording)
        name = name[: -len(".recording.csv")] if name.endswith(".recording.csv") else name
        # Beside the recording, unless that is attach()'s temporary directory.
        directory = os.path.dirname(recording)
        if os.path.basename(directory).startswith("training-watchdog-"):
            directory = _defaults.state_dir()
            os.makedirs(directory, mode=0o700, exist_ok=True)
        output = os.path.join(directory, name + ".report.html")
    output = os.fspath(output)
    proc = subprocess.run(
        [binary, "report", recording, "-o", output],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            "watchdog report %s -o %s failed with status %d: %s"
            % (recording, output, proc.returncode, proc.stderr.strip())
        )
    if _ipython() is not None and output.endswith(".html"):
        return _html_inline(output)
    return output


def _format_amount(value, unit):
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "?"
    if unit == "bytes":
        for name, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= scale:
                return "%.1f %s" % (value / scale, name)
        return "%d B" % value
    if unit == "millis":
        return _format_seconds(value / 1000.0)
    return "%d" % value


def _format_seconds(s):
    if s >= 3600:
        return "%dh%02dm" % (s // 3600, (s % 3600) // 60)
    if s >= 60:
        return "%dm%02ds" % (s // 60, s % 60)
    return "%.1f s" % s


def _alert_text(req):
    """One sentence for a person: what runs out, how much is used, how long is left; for a
    notice (kind ``notice``), that the run is being stopped and by when to save."""
    if _is_notice(req):
        why = {"terminating": "the run is being stopped (SIGTERM)",
               "preemption": "the machine is being preempted"}.get(req.get("reason"), "the run is being stopped")
        deadline = _number(req, "deadline_unix")
        if deadline is not None:
            by = "; save by %s, %s from now" % (time.strftime("%H:%M:%S", time.localtime(deadline)),
                                              _format_seconds(max(deadline - time.time(), 0.0)))
        else:
            by = "; save now"
        return (
            "watchdog: %s%s (request %s). Save a checkpoint, then call training_watchdog.acknowledge()."
            % (why, by, req.get("seq", "?"))
        )
    unit = req.get("unit")
    used, limit = _format_amount(req.get("used"), unit), _format_amount(req.get("limit"), unit)
    left = _number(req, "predicted_s")
    when = "about %s left" % _format_seconds(max(left, 0.0)) if left is not None else "headroom below the floor"
    return (
        "watchdog: %s is running out: %s of %s used, %s (request %s). Save a checkpoint, then call "
        "training_watchdog.acknowledge(); the handle's report() draws the recording."
        % (req.get("resource", "a resource"), used, limit, when, req.get("seq", "?"))
    )


def _announce(req):
    """Shows a new request once (never raises into the loop); called while a watchdog is attached."""
    global _shown
    key = (_seq(req), _number(req, "time_unix"))
    if key == _shown:
        return
    _shown = key
    text = _alert_text(req)
    try:
        shell = _ipython()
        if shell is not None:
            import html

            from IPython.display import display

            box = (
                '<div style="border-left:4px solid #c0392b;background:#fdecea;padding:6px 10px">'
                "&#9888; %s</div>" % html.escape(text)
            )
            display({"text/plain": text, "text/html": box}, raw=True)
            return
    except Exception:
        pass
    import warnings

    warnings.warn(text, CheckpointRequestWarning, stacklevel=3)


def _reset_state():
    """Forget the request shown last (for tests)."""
    global _shown
    _shown = None
