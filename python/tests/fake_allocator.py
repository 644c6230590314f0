"""A fake CUDA caching allocator at the boundary the client reads, for tests without a GPU.

:class:`FakeAllocator` installs, into the real ``torch.cuda`` of a CPU machine, scripted
``is_initialized``, ``current_device``, ``memory_stats``, ``reset_peak_memory_stats`` and
``get_device_properties``, and puts the originals back on :meth:`FakeAllocator.restore`
(or at the end of a ``with`` block). A test's training code calls :meth:`step` once per
step (in ``training_step``, ``validation_step``, a loop) with the phase; the step's
allocations follow one of the documented shapes below, and the figures move as a caching
allocator's do: ``allocated`` up and down, ``peak`` the most allocated since the last
reset, ``reserved`` never below the most ever allocated (the cache keeps what it took).

Shapes (sizes in MiB; every step frees what it allocates for itself):

``steady``
    1024 held (weights, optimizer state); a training step allocates 512 of activations,
    an evaluation step 256. Peaks: 1536 train, 1280 eval, every step.
``leak``
    ``steady``, and each training step keeps 64 more (a tensor kept in a list): the
    training peak grows by 64 a step.
``eval_growth``
    ``steady``, but the k-th evaluation (k from 1) allocates 256 * k per step: its peak
    grows by 256 from one evaluation to the next while training stays flat.
``retries``
    ``steady``, and from the 10th training step on each one costs an allocation retry
    (``num_alloc_retries`` + 1) and leaves 32 more reserved but unallocated: a fragmenting
    cache.
"""

import sys

MiB = 1 << 20
SHAPES = ("steady", "leak", "eval_growth", "retries")
# A device UUID as torch shows it (str of torch._C._CUuuid): no "GPU-" prefix.
UUID = "5a1b2c3d-0000-4000-8000-00000000abcd"


class _Uuid:
    """Stands for ``torch._C._CUuuid``: ``str()`` gives the 8-4-4-4-12 hex form."""

    def __init__(self, text):
        self.text = text
        self.bytes = bytes.fromhex(text.replace("-", ""))

    def __str__(self):
        return self.text


class _Properties:
    def __init__(self, total, uuid):
        self.name = "Fake GPU"
        self.total_memory = total
        self.uuid = _Uuid(uuid) if uuid else None


class FakeAllocator:
    """The allocator of one fake device (``index``), following ``shape`` (see the module)."""

    _NAMES = ("is_initialized", "current_device", "memory_stats", "reset_peak_memory_stats",
              "get_device_properties")

    def __init__(self, shape="steady", index=0, uuid=UUID, total=16 << 30):
        if shape not in SHAPES:
            raise ValueError("shape=%r: expected one of %s" % (shape, ", ".join(SHAPES)))
        self.shape = shape
        self.index = index
        self.uuid = uuid
        self.total = total
        self.allocated = 0
        self.peak = 0
        self.reserved = 0
        self.retries = 0
        self.ooms = 0
        self.steps = {"train": 0, "eval": 0, "other": 0}
        self.passes = {"train": 0, "eval": 0, "other": 0}
        self.last_phase = None
        self.stats_calls = 0
        self.resets = 0
        self._saved = None
        self._alloc(1024 * MiB)  # weights and optimizer state

    # --- the allocator ---------------------------------------------------------------------

    def _alloc(self, n):
        self.allocated += n
        self.peak = max(self.peak, self.allocated)
        self.reserved = max(self.reserved, self.allocated)

    def _free(self, n):
        self.allocated -= n

    def step(self, phase="train"):
        """One step of ``phase`` (``train``, ``eval``, ``other``) by this allocator's shape."""
        if phase != self.last_phase:
            self.passes[phase] += 1
            self.last_phase = phase
        self.steps[phase] += 1
        if phase == "train":
            transient = 512 * MiB
            if self.shape == "leak":
                self._alloc(64 * MiB)  # kept
            if self.shape == "retries" and self.steps["train"] >= 10:
                self.retries += 1
                self.reserved += 32 * MiB
        elif phase == "eval":
            transient = 256 * MiB * (self.passes["eval"] if self.shape == "eval_growth" else 1)
        else:
            transient = 64 * MiB
        self._alloc(transient)
        self._free(transient)

    # --- what torch.cuda answers while installed -----------------------------------------

    def is_initialized(self):
        return True

    def current_device(self):
        return self.index

    def _check(self, device):
        if device is not None and int(getattr(device, "index", device) or 0) != self.index:
            raise RuntimeError("fake allocator: no device %r" % (device,))

    def memory_stats(self, device=None):
        self._check(device)
        self.stats_calls += 1
        return {
            "allocated_bytes.all.current": self.allocated,
            "allocated_bytes.all.peak": self.peak,
            "reserved_bytes.all.current": self.reserved,
            "num_alloc_retries": self.retries,
            "num_ooms": self.ooms,
            # a few of the others a real memory_stats() holds, so that readers pick their keys
            "active_bytes.all.current": self.allocated,
            "num_device_alloc": 1,
        }

    def reset_peak_memory_stats(self, device=None):
        self._check(device)
        self.resets += 1
        self.peak = self.allocated

    def get_device_properties(self, device=None):
        self._check(device)
        return _Properties(self.total, self.uuid)

    # --- installing ------------------------------------------------------------------------

    def install(self):
        """Put this allocator's functions into the imported ``torch.cuda``; returns self."""
        import torch

        if self._saved is None:
            self._saved = {name: getattr(torch.cuda, name) for name in self._NAMES}
            for name in self._NAMES:
                setattr(torch.cuda, name, getattr(self, name))
        return self

    def restore(self):
        """Put torch.cuda's own functions back."""
        if self._saved is not None:
            cuda = sys.modules["torch"].cuda
            for name, fn in self._saved.items():
                setattr(cuda, name, fn)
            self._saved = None

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.restore()
        return False
