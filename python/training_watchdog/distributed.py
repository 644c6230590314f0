"""Checkpoints agreed across ranks: when any rank is asked, every rank saves at the same step.

On a job of several processes, each node's watchdog asks only the ranks it watches. A rank
that saved alone would then wait at its next collective for ranks that never arrive (a
sharded save, a barrier, the next all-reduce of gradients): the job hangs. An
:class:`Agreement` turns the local requests into one decision shared by all ranks: every
``every`` steps, each rank contributes its local "requested" flag to one
``all_reduce(MAX)`` of a one-element tensor, and all ranks get the same answer at the same
step::

    import training_watchdog as tw
    from training_watchdog.distributed import Agreement

    tw.install()                     # on every rank, before training
    agree = Agreement()              # after torch.distributed.init_process_group()
    for step in range(start, steps):
        train_step()
        if agree.requested(step):    # same value on every rank
            save_checkpoint(step)    # every rank takes part, as in any save
            agree.acknowledge()

Every rank must call :meth:`Agreement.requested` at every step, with the same ``step``
(it is a collective on the steps that are multiples of ``every``). Without
``torch.distributed`` initialized, or with one rank, it is :func:`checkpoint_requested`
itself, checked at every step with no collective.

``every`` (default :data:`DEFAULT_EVERY`) trades the cost of the collective against the
delay: a request is seen at most ``every - 1`` steps late. How the default was chosen is
in docs/frameworks.md ("How often ranks agree"). Keep ``every`` steps well below the
watchdog's ``--lead`` (30 s by default).

``torch`` is imported only when an Agreement runs its collective; this package has no
dependency.
"""

import training_watchdog as _tw

__all__ = ["Agreement", "DEFAULT_EVERY", "torch_any"]

#: Steps between two agreements. Measured on 2 CPU ranks with gloo (docs/frameworks.md,
#: "How often ranks agree"): one agreement took 383-470 us (medians of two runs) against
#: 1.2-2.7 ms for a toy DDP step, so agreeing at every step adds 17-32% to such a step;
#: every 10 steps 2-3%, nothing measurable on real steps, and a request waits at most 9.
DEFAULT_EVERY = 10


def _world_size(group=None):
    """Ranks in ``group`` when torch.distributed is initialized, else 1 (never imports torch)."""
    import sys

    if "torch" not in sys.modules:
        return 1
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


def torch_any(flag, group=None, device=None):
    """True on every rank when ``flag`` is true on any rank of ``group``: one ``all_reduce(MAX)``.

    The tensor lives on the CPU for gloo and on the current CUDA device for NCCL (or on
    ``device`` when given). A collective: every rank of the group must call it.
    """
    import torch
    import torch.distributed as dist

    if device is None:
        backend = str(dist.get_backend(group)).lower()
        if "nccl" in backend and "gloo" not in backend and torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())
        else:
            device = torch.device("cpu")
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return bool(t.item())


class Agreement:
    """One decision for all ranks: was a checkpoint requested on any of them?

    ``every``: steps between two collectives (default :data:`DEFAULT_EVERY`). ``reduce_any``:
    a function ``flag -> bool`` true on every rank when true on any (default: :func:`torch_any`
    on ``group``); the Lightning callback passes its strategy's. ``world_size``: how many
    ranks ``reduce_any`` spans (default: torch.distributed's, 1 when it is not initialized);
    with one rank no collective is run and the local request is answered at every step.
    """

    def __init__(self, every=DEFAULT_EVERY, reduce_any=None, world_size=None, group=None):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError("every must be a whole number of steps, 1 or more; got %r" % (every,))
        self.every = every
        self._group = group
        self._reduce_any = reduce_any
        self._world_size = world_size
        self._calls = 0

    @property
    def world_size(self):
        """How many ranks agree (re-read each time: the process group may start after construction)."""
        if self._world_size is not None:
            return self._world_size
        return _world_size(self._group)

    def requested(self, step=None):
        """Whether every rank should save now; the same answer on every rank.

        ``step``: the global step, the same on every rank (default: the number of earlier
        calls). With several ranks, a collective when ``step`` is a multiple of ``every``,
        False without one on the other steps.
        """
        if step is None:
            step = self._calls
        self._calls += 1
        local = _tw.checkpoint_requested()
        if self.world_size <= 1:
            return local
        if step % self.every != 0:
            return False
        if self._reduce_any is not None:
            return bool(self._reduce_any(local))
        return torch_any(local, group=self._group)

    def acknowledge(self, path=None, step=None):
        """After the agreed save, on every rank: acknowledges this rank's request, if it had one
        (``path`` and ``step``: the checkpoint and its global step, for the ack)."""
        return _tw.acknowledge(path=path, step=step)
