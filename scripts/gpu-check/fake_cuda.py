"""Self-test only: a fake CUDA allocator on the CPU, so check.py's GPU path can be run without a GPU.

Used only when check.py is given the fake NVML library (GPU_CHECK_SELF_TEST_FAKE_NVML), which
sets GPU_CHECK_FAKE_CUDA=1 for the workloads; every figure it gives is made up, and check.py
marks every result of such a run as fake. It replaces the few torch.cuda functions the
workloads and the client call (is_initialized, current_device,
get_device_properties, mem_get_info, memory_stats, memory_allocated, memory_reserved,
max_memory_allocated, reset_peak_memory_stats, synchronize, empty_cache) with a budget kept
in Python: ``alloc(n)`` returns a small CPU tensor that stands for n bytes until it is freed,
and raises torch.OutOfMemoryError("CUDA out of memory. ...") past the budget, as the caching
allocator would (reserved memory is kept until empty_cache, like the cache).
``is_available()`` stays False, so torch itself and the frameworks keep to the CPU.
"""

import os
import types
import weakref

MIB = 1 << 20
# The fake device: FAKE_TOTAL_MIB as CUDA sees it (check.py writes the same device, plus its
# NVML-reserved memory, into the fake NVML script).
TOTAL = int(os.environ.get("GPU_CHECK_FAKE_TOTAL_MIB", "1024")) * MIB
UUID = os.environ.get("GPU_CHECK_FAKE_UUID", "GPU-00000000-1111-2222-3333-444444444444")


class Allocator:
    def __init__(self, torch):
        self.torch = torch
        self.allocated = 0
        self.reserved = 0
        self.peak = 0
        self.retries = 0
        self.ooms = 0

    def alloc(self, nbytes):
        n = int(nbytes)
        if self.allocated + n > TOTAL:
            self.ooms += 1
            raise self.torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate %.2f MiB. GPU 0 has a total capacity of %.2f MiB "
                "of which %.2f MiB is free. (fake allocator of scripts/gpu-check self-test)"
                % (n / MIB, TOTAL / MIB, (TOTAL - self.allocated) / MIB))
        if self.reserved + n > TOTAL and self.allocated + n <= TOTAL:
            self.retries += 1   # the cache had to be emptied to fit it
            self.reserved = self.allocated
        self.allocated += n
        self.reserved = max(self.reserved, self.allocated)
        self.peak = max(self.peak, self.allocated)
        t = self.torch.empty(1, dtype=self.torch.uint8)
        weakref.finalize(t, self._free, n)
        return t

    def _free(self, n):
        self.allocated -= n

    def stats(self, device=None):
        return {"allocated_bytes.all.current": self.allocated, "allocated_bytes.all.peak": self.peak,
                "reserved_bytes.all.current": self.reserved, "num_alloc_retries": self.retries,
                "num_ooms": self.ooms}


def install(torch):
    """Replace torch.cuda's memory functions by the fake allocator's; returns it."""
    a = Allocator(torch)
    props = types.SimpleNamespace(name="Fake GPU (gpu-check self-test)", total_memory=TOTAL,
                                  uuid=UUID[4:] if UUID.startswith("GPU-") else UUID)

    def reset_peak(device=None):
        a.peak = a.allocated

    def empty_cache():
        a.reserved = a.allocated

    fakes = {
        "is_initialized": lambda: True,
        "current_device": lambda: 0,
        "get_device_properties": lambda device=None: props,
        "mem_get_info": lambda device=None: (TOTAL - a.reserved, TOTAL),
        "memory_stats": a.stats,
        "memory_allocated": lambda device=None: a.allocated,
        "memory_reserved": lambda device=None: a.reserved,
        "max_memory_allocated": lambda device=None: a.peak,
        "reset_peak_memory_stats": reset_peak,
        "synchronize": lambda device=None: None,
        "empty_cache": empty_cache,
    }
    for name, fn in fakes.items():
        setattr(torch.cuda, name, fn)
    return a
