"""Client for ``watchdog``: learn that a checkpoint is needed, save it at a safe point, say so.

The watchdog watches a training run (memory, cgroup memory, disk, runtime), predicts when a
resource will run out, and then (1) writes a JSON *request file*, and (2) sends a signal
(default SIGUSR1) to every process of the run that catches it. This module is the training
side, standard library only::

    import training_watchdog as tw
    tw.install()                         # catch the signal: only sets a flag
    for step in range(steps):
        train_step()
        if tw.checkpoint_requested():    # flag set, or a request file not yet acknowledged
            save_checkpoint()
            tw.acknowledge()             # writes <request file>.ack

Never save inside the signal handler (that hangs intermittently); the handler only sets a
flag and the loop checkpoints at the next step. ``checkpoint_requested()`` also looks at the
request file, because a notebook kernel may reset signal handlers between cells.

In a notebook, :func:`attach` starts the watchdog on the kernel itself (the binary comes with
``pip install training-watchdog``; no need to activate the environment)::

    h = tw.attach(mem_limit="12GiB", lead="60s")   # returns once it watches; again: same handle
    ...                                            # the loop above; a request is shown in the cell
    h.report()                                     # the flight recording, drawn inline
    h.stop()                                       # stopped, temp dir removed, recording kept

Environment, set by ``watchdog run`` (or by :func:`attach`): ``WATCHDOG_SIGNAL`` (e.g.
``SIGUSR1``), ``WATCHDOG_REQUEST_FILE`` (path of the request file), ``WATCHDOG_PID``.

Under ``watchdog daemon`` (the workstation service, which finds runs by itself) nothing is
set. Then :func:`install` registers the process with the daemon when its socket
(``$WATCHDOG_SOCKET``, default ``/run/watchdog/daemon.sock``) exists: one JSON line
``{"op": "register", "pid": PID}``, answered by the request file the daemon will write
(2 s timeout; no socket: nothing happens; an error: a warning, never an exception).
``install(register=False)`` does not register. And :func:`request_file` finds a run the
daemon discovered without registration: ``<dir>/<uid>/<pid>.request.json``, ``<dir>`` being
``$WATCHDOG_DAEMON_DIR`` (default ``/run/watchdog/users``), for this process's PID and then
each ancestor's of the same user (the daemon names the file after the run's first process,
and this may be a child of it). The ancestors are read from ``/proc`` once per process;
after that a call costs one ``stat`` more than with ``WATCHDOG_REQUEST_FILE``.

Acknowledgment protocol: :func:`acknowledge` writes ``<request file>.ack`` atomically (temp
file + rename) with ``{"seq": N, "time_unix": T}``, ``N`` the ``seq`` of the request handled and
``T`` the time the checkpoint was done, plus ``path``, ``step`` and ``cause`` when given
(docs/recording.md). A request is pending while no ack has its ``seq`` and a ``time_unix`` at
or after the request's ``time_unix``.

When a CUDA out-of-memory error ends a step anyway, :func:`last_chance` (a context manager
around a plain loop; the framework modules have their own) saves the run before the error
ends it, acknowledges with ``cause="cuda_oom"`` and re-raises the error.

When SIGTERM reaches the run itself (SLURM's ``scancel``, systemd's ``KillMode=control-group``
and a VM's shutdown send it to every process), ``install(on_term="save")`` turns it into a
request: the handler only sets a flag, :func:`checkpoint_requested` returns True, the loop
saves and calls :func:`acknowledge` (``{"seq": 0, "cause": "terminating"}`` when no request
file asks for the save), and then SIGTERM is raised again with the disposition it had
before, so the process ends with status 143 (docs/notices.md).

The package is split by job; this module only gathers the public names (and, for code that
reached into the package before the split, its private helpers that hold no state):
``_units`` (signal names, durations), ``_defaults`` (the binary's defaults: the state
directory, the service's socket), ``_signals`` (the handler, :func:`install`, SIGTERM),
``_requests`` (the request and ack files), ``_service`` (the workstation service, where the
request file is), ``_process`` (:func:`attach`: the binary, its flags, the handle),
``_display`` (a request shown in a notebook, the report), ``_files`` (bounded reads, atomic
writes), ``_environment``, ``_protocol`` and ``_messages``. State (the flag, the request
being handled, the attached watchdog) lives in the module that owns it, never here.
"""

__all__ = [
    "install",
    "checkpoint_requested",
    "request",
    "acknowledge",
    "last_chance",
    "attach",
    "attached",
    "WatchdogHandle",
    "StopResult",
    "CheckpointRequestWarning",
    "request_file",
    "report_step",
    "TERM_CAUSE",
]

__version__ = "0.1.0"

from training_watchdog import _display, _process, _requests, _service, _signals
from training_watchdog._defaults import DAEMON_DIR as _DAEMON_DIR
from training_watchdog._defaults import DAEMON_SOCKET as _DAEMON_SOCKET
from training_watchdog._defaults import LAST_CHANCE_TIMEOUT_S as _LAST_CHANCE_TIMEOUT_S
from training_watchdog._defaults import state_dir as _state_dir
from training_watchdog._display import (  # noqa: F401
    CheckpointRequestWarning,
    _alert_text,
    _announce,
    _format_amount,
    _format_seconds,
    _html_inline,
    _ipython,
    _report,
)
from training_watchdog._environment import (  # noqa: F401
    _CUDA_LINE,
    _PACKAGES,
    _installed,
    _metadata_version,
    _normalized,
    _report_environment,
    _reported,
    environment,
)
from training_watchdog._files import (  # noqa: F401
    _MAX_FILE_BYTES,
    _READ_FLAGS,
    _open_regular,
    _parse_object,
    _read_capped,
    _Unfit,
    _write_atomic,
)
from training_watchdog._messages import _caller_stacklevel, _failure, _message, _safe_repr, _type_name  # noqa: F401
from training_watchdog._process import (  # noqa: F401
    _ENV_KEYS,
    _MISSING,
    _OPTIONS,
    _OWN_FLAGS,
    _RECORDING_IN_LOG,
    StopResult,
    WatchdogHandle,
    _find_watchdog,
    _forget_in_child,
    _fresh_recording,
    _keep_recording,
    _option_args,
    _Plan,
    _recording_from_log,
    _register_atexit,
    _Restore,
    _set_interval,
    _start_failure,
    _stop_at_exit,
    _wait_ready,
    attach,
    attached,
)
from training_watchdog._protocol import TERM_CAUSE, _ack_path, _is_notice, _is_term_notice, _number  # noqa: F401
from training_watchdog._requests import (  # noqa: F401
    _LATE_SIGNAL_S,
    _ack_fields,
    _cache,
    _file_request,
    _late_signal_of,
    _pending,
    _read_json_cached,
    _refused,
    _warn_refused,
    _write_ack,
    acknowledge,
    checkpoint_requested,
    request,
)
from training_watchdog._service import (  # noqa: F401
    _MAX_REPLY,
    _REGISTER_TIMEOUT_S,
    _ancestors,
    _daemon_request_file,
    _register_with_daemon,
    _request_file_or_register,
    request_file,
)
from training_watchdog._signals import (  # noqa: F401
    _ON_TERM,
    _catch,
    _check_on_term,
    _check_term_signal,
    _end_by_sigterm,
    _handler,
    _previous,
    _release_term,
    _take_sigterm,
    _term_at_exit,
    _term_handler,
    _term_pending,
    install,
)
from training_watchdog._units import (  # noqa: F401
    _CRASH_SIGNALS,
    _DURATION_UNITS,
    _RT_NAME,
    _SIGNAL_EXPECTED,
    _SIGNAL_NAMES,
    _checkpoint_signal,
    _duration_seconds,
    _resolve_signal,
    _seconds_text,
    _signal_name,
    _signal_problem,
)


def last_chance(save, step=None, phase="train", timeout=_LAST_CHANCE_TIMEOUT_S):
    """Context manager around a plain training loop: on a CUDA out-of-memory error inside
    it, free the step's memory, call ``save`` (it saves and returns the path), acknowledge
    with ``cause="cuda_oom"``, and let the error go on::

        def save(step):                  # or save(): the step is given when it takes one
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, p)
            return p

        with training_watchdog.last_chance(save) as run:
            for step in range(start, steps):
                run.step = step          # where the loop is: the checkpoint resumes there
                train_step()

    The original error always goes on, unchanged: a save that fails, is interrupted
    (``KeyboardInterrupt``, ``SystemExit``: noted on the error and logged, never raised in
    its place) or takes more than ``timeout`` seconds (default 300; None: no bound) is
    logged and not acknowledged. See :mod:`training_watchdog.oom` for how the bound is kept;
    Lightning, Transformers and Keras have their own.
    """
    from training_watchdog.oom import LastChance

    if not callable(save):
        raise TypeError("last_chance(save=%s): expected a function that saves and returns the path" % _safe_repr(save))
    return LastChance(save, step=step, phase=phase, timeout=timeout)


def report_step(step, phase="train", batch_size=None, tokens=None, reset_peak=True):
    """The allocator's figures at the end of one step, for the watchdog: see
    :func:`training_watchdog.allocator.report_step` (one call per step in a plain loop)."""
    from training_watchdog import allocator

    return allocator.report_step(step, phase, batch_size, tokens, reset_peak)


def _reset():
    """Forget all state (for tests); stops an attached watchdog."""
    if _process._attached is not None:
        _process._attached.stop()
    _signals._reset_state()
    _requests._reset_state()
    _service._reset_state()
    _display._reset_state()
    _reported.clear()
